"""The key, sequence and operation columns of data files, kept in memory for the lookup of stored keys.

Files never change, so what a lookup read of one (:mod:`mere.table.stored_keys`) is kept, most recently
used first, up to :data:`CACHE_BYTES`; so are the sequence bounds its statistics give. A file this
process writes is kept from the rows it wrote (:func:`remember`): the next commit's lookup finds the
files of the commits before it, and its own, without reading them back.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mere.io import Storage
from mere.io.footer import primitive_leaf
from mere.metadata import FileEntry
from mere.read.evolution import file_columns, to_table_columns
from mere.spec import OP_COLUMN, TableSpec

CACHE_BYTES = 256 << 20
_cache: OrderedDict[tuple[str, tuple[str, ...]], tuple[pa.Table, np.ndarray | None]] = OrderedDict()
_cache_bytes = 0
_lock = threading.Lock()
_bounds: OrderedDict[tuple[str, str], tuple[Any, Any] | None] = OrderedDict()
BOUNDS_FILES = 100_000


def forget() -> None:
    """Drop every kept file's columns and bounds (what a new process knows: nothing)."""
    global _cache_bytes
    with _lock:
        _cache.clear()
        _bounds.clear()
        _cache_bytes = 0


def lookup_columns(spec: TableSpec) -> list[str]:
    """The columns a lookup reads: key, sequence, operation."""
    return [*spec.primary_key, *spec.sequence_by, OP_COLUMN]


def file_versions(
    storage: Storage, spec: TableSpec, f: FileEntry, columns: list[str]
) -> tuple[pa.Table, np.ndarray | None]:
    """The ``columns`` of a whole file, and its keys as a NumPy array where the key is one integer
    column in strictly increasing order (files are written sorted; None otherwise)."""
    cached = not spec.evolved
    key = (storage.full_path(f.path), tuple(columns))
    if cached:
        with _lock:
            hit = _cache.get(key)
            if hit is not None:
                _cache.move_to_end(key)
                return hit
    md = storage.metadata(f.path, f.size_bytes or None)
    mapping = file_columns(spec, md) if spec.evolved else None
    names = columns if mapping is None else mapping.file_names(columns)
    rows = storage.read_row_groups(f.path, range(md.num_row_groups), names, f.size_bytes or None)
    if mapping is not None:
        rows = to_table_columns(rows, mapping, spec)
    out = _with_keys(spec, rows.select(columns).combine_chunks())
    if cached:
        _keep(key, out)
    return out


def all_kept(storage: Storage, spec: TableSpec, files: Sequence[FileEntry], columns: list[str]) -> bool:
    """Whether the ``columns`` of every file are kept (a lookup of them reads nothing)."""
    if spec.evolved:
        return False
    with _lock:
        return all((storage.full_path(f.path), tuple(columns)) in _cache for f in files)


def remember(
    storage: Storage, spec: TableSpec, entries: Sequence[FileEntry], rows: Sequence[pa.Table]
) -> None:
    """Keep the lookup columns of files just written (``rows``: each entry's rows, in file order), on
    tables whose commits look up stored keys (``sequence_by``, table-wide keys)."""
    if spec.evolved or not (spec.sequence_by or spec.cross_partition):
        return
    columns = lookup_columns(spec)
    for f, r in zip(entries, rows):
        if r.num_rows != f.row_count or not set(columns) <= set(r.column_names):
            continue
        picked = r.select(columns)
        # the types a read of the file gives (the writer may hand strings dictionary-encoded)
        target = [spec.schema.field(c).type if c != OP_COLUMN else pa.int8() for c in columns]
        picked = pa.Table.from_arrays(
            [picked.column(i).cast(t) for i, t in enumerate(target)], names=columns
        ).combine_chunks()
        path = storage.full_path(f.path)
        _keep((path, tuple(columns)), _with_keys(spec, picked))
        if len(spec.sequence_by) == 1 and pa.types.is_integer(picked.schema.field(spec.sequence_by[0]).type):
            lo, hi = pc.min_max(picked.column(spec.sequence_by[0])).values()
            if lo.is_valid:  # what the file's statistics say
                _keep_bounds((path, spec.sequence_by[0]), (lo.as_py(), hi.as_py()))


def sequence_bounds(storage: Storage, f: FileEntry, column: str) -> tuple[Any, Any] | None:
    """The smallest and largest value of ``column`` in a file by its statistics (None: unknown)."""
    key = (storage.full_path(f.path), column)
    with _lock:
        if key in _bounds:
            return _bounds[key]
    known = _statistics_bounds(storage, f, column)
    _keep_bounds(key, known)
    return known


def _statistics_bounds(storage: Storage, f: FileEntry, column: str) -> tuple[Any, Any] | None:
    lo: Any = None
    hi: Any = None
    md = storage.metadata(f.path, f.size_bytes or None)
    leaf = primitive_leaf(md, storage.column_leaves(f.path, f.size_bytes or None), column)
    if leaf is None:
        return None
    for g in range(md.num_row_groups):
        st = md.row_group(g).column(leaf).statistics
        if st is None or not st.has_min_max:
            return None
        lo = st.min if lo is None else min(lo, st.min)
        hi = st.max if hi is None else max(hi, st.max)
    return None if lo is None else (lo, hi)


def _with_keys(spec: TableSpec, rows: pa.Table) -> tuple[pa.Table, np.ndarray | None]:
    keys = None
    pk = spec.primary_key
    if len(pk) == 1 and pa.types.is_integer(rows.schema.field(pk[0]).type) and rows.num_rows:
        values = rows.column(pk[0]).to_numpy()
        if len(values) < 2 or bool((values[1:] > values[:-1]).all()):
            keys = values
    return rows, keys


def _keep(key: tuple[str, tuple[str, ...]], value: tuple[pa.Table, np.ndarray | None]) -> None:
    global _cache_bytes
    with _lock:
        if key not in _cache:
            _cache[key] = value
            _cache_bytes += value[0].nbytes
        while _cache_bytes > CACHE_BYTES and _cache:
            _, (old, _) = _cache.popitem(last=False)
            _cache_bytes -= old.nbytes


def _keep_bounds(key: tuple[str, str], value: tuple[Any, Any] | None) -> None:
    with _lock:
        _bounds[key] = value
        while len(_bounds) > BOUNDS_FILES:
            _bounds.popitem(last=False)
