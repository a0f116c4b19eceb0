"""Scan planning: prune partitions, buckets, files and row groups, then cut the scan into splits.

Only filters on key and partition columns prune anything before the merge: every version of a key
shares those values, so a file or row group that cannot hold a matching key holds no version of one.
Filters on other columns run after the merge.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from mere import expr as E
from mere.arrays import sorted_unique
from mere.errors import FilterError
from mere.hashing import bucket_ids
from mere.io.footer import primitive_leaf
from mere.metadata import FileEntry
from mere.partitions import parse_partition, typed_partition
from mere.spec import TableSpec


@dataclass(frozen=True)
class FileTask:
    """One data file of a split, as a reader needs it (picklable, no open handles)."""

    path: str
    seq: int
    content: str
    row_count: int
    size_bytes: int
    columns: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Split:
    """All files of one (partition, bucket): the unit a task merges on its own."""

    partition: tuple[tuple[str, str | None], ...]
    bucket: int
    files: tuple[FileTask, ...]

    @property
    def size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    @property
    def row_count(self) -> int:
        return sum(f.row_count for f in self.files)

    def to_json(self) -> str:
        return json.dumps(
            {
                "partition": [list(p) for p in self.partition],
                "bucket": self.bucket,
                "files": [
                    f.__dict__ | {"columns": None if f.columns is None else list(f.columns)}
                    for f in self.files
                ],
            }
        )

    @staticmethod
    def from_json(text: str) -> Split:
        d = json.loads(text)
        return Split(
            tuple((p[0], p[1]) for p in d["partition"]),
            int(d["bucket"]),
            tuple(
                FileTask(**(f | {"columns": None if f["columns"] is None else tuple(f["columns"])}))
                for f in d["files"]
            ),
        )


@dataclass
class Explain:
    """What a scan keeps at each pruning stage and where each filter runs."""

    version: int
    partitions_total: int = 0
    partitions_kept: int = 0
    buckets_total: int = 0
    buckets_kept: int = 0
    files_total: int = 0
    files_kept: int = 0
    row_groups_total: int = 0
    row_groups_kept: int = 0
    bytes_total: int = 0
    bytes_kept: int = 0  # stored bytes of the kept row groups' columns that are read (footers excluded)
    pre_merge_filter: str = "true"
    post_merge_filter: str = "true"
    key_lookup: list[tuple[Any, ...]] | None = None
    splits: int = 0
    notes: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [
            f"scan at version {self.version}",
            f"  partitions : {self.partitions_kept}/{self.partitions_total}",
            f"  buckets    : {self.buckets_kept}/{self.buckets_total}"
            + (f" (key lookup of {len(self.key_lookup)} key(s))" if self.key_lookup is not None else ""),
            f"  files      : {self.files_kept}/{self.files_total}",
            f"  row groups : {self.row_groups_kept}/{self.row_groups_total}",
            f"  bytes      : {self.bytes_kept}/{self.bytes_total}",
            f"  splits     : {self.splits}",
            f"  before merge (key/partition columns): {self.pre_merge_filter}",
            f"  after merge  (all other columns)    : {self.post_merge_filter}",
        ]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


@dataclass
class FilterParts:
    bound: E.Expr
    pre: E.Expr  # key/partition columns only: safe before the merge
    post: E.Expr  # everything else: after the merge
    key_points: list[tuple[Any, ...]] | None


def split_filter(spec: TableSpec, filter_: E.Expr | str | Any | None) -> FilterParts:
    bound = E.bind(E.to_expr(filter_), spec.schema)
    if not isinstance(bound, E.AlwaysTrue):
        try:  # catches what binding cannot see, e.g. unknown columns inside a pyarrow expression
            spec.schema.empty_table().filter(E.to_pyarrow(bound, spec.schema))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError) as e:
            raise FilterError(f"filter {bound} does not fit the table schema: {e}") from e
    if spec.has_primary_key:
        pre, post = E.split_by_columns(bound, spec.identity_columns)
        points = E.key_points(pre, spec.primary_key)
    else:  # no merge: every filter may prune and run while reading
        pre, post = bound, E.AlwaysTrue()
        points = None
    return FilterParts(bound, pre, post, points)


def plan_splits(
    spec: TableSpec, files: Sequence[FileEntry], parts: FilterParts, explain: Explain
) -> list[Split]:
    """Group live files into splits, dropping partitions and buckets the pre-merge filter excludes."""
    by_split: dict[tuple[str, int], list[FileEntry]] = {}
    for f in files:
        by_split.setdefault((f.partition, f.bucket), []).append(f)
    partitions = {p for p, _ in by_split}
    explain.partitions_total = len(partitions)
    explain.files_total = len(files)
    explain.bytes_total = sum(f.size_bytes for f in files)
    explain.buckets_total = len({b for _, b in by_split}) if spec.has_primary_key else 0
    keep_partition = {p: _partition_kept(spec, parts, p) for p in partitions}
    allowed_buckets = _allowed_buckets(spec, parts)
    if parts.key_points is not None:
        explain.key_lookup = parts.key_points
    splits = []
    for (p, b), fs in sorted(by_split.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if not keep_partition[p]:
            continue
        if allowed_buckets is not None and b not in allowed_buckets:
            continue
        fs = sorted(fs, key=lambda f: (f.seq or 0, f.id or 0))
        splits.append(
            Split(
                tuple(parse_partition(p).items()),
                b,
                tuple(
                    FileTask(
                        f.path,
                        int(f.seq or 0),
                        f.content,
                        f.row_count,
                        f.size_bytes,
                        None if f.columns is None else tuple(f.columns),
                    )
                    for f in fs
                ),
            )
        )
    explain.partitions_kept = len({s.partition for s in splits})
    explain.buckets_kept = len({s.bucket for s in splits}) if spec.has_primary_key else 0
    explain.splits = len(splits)
    return splits


def _partition_kept(spec: TableSpec, parts: FilterParts, partition: str) -> bool:
    """Whether the pre-merge filter may hold for a partition (JSON) of the table."""
    if not spec.partition_by:
        return True
    values = typed_partition(spec, parse_partition(partition))
    return E.evaluate_constant(parts.pre, values) is not False


def _allowed_buckets(spec: TableSpec, parts: FilterParts) -> set[int] | None:
    """The buckets the filter's key points hash to (None: the filter names no key points)."""
    points = parts.key_points
    if points is None:
        return None
    if not points:
        return set()
    cols = [[p[0] for p in points]] if len(spec.primary_key) == 1 else [list(c) for c in zip(*points)]
    arrays = [pa.array(c, type=spec.schema.field(k).type) for c, k in zip(cols, spec.primary_key)]
    return set(sorted_unique(bucket_ids(arrays, spec.buckets)).tolist())


@dataclass(frozen=True)
class ReadScope:
    """Where rows matching a filter can be, whether or not files hold them yet: the splits (as commit
    summaries name them, ``partition#bucket``) a concurrent commit must not change under a write that
    read the filter's rows.

    ``buckets``: the buckets that can hold a matching row (None: every bucket). ``excluded``: partitions
    that existed when the filter was read and that it rules out; a partition created later is always in
    scope (its values were never checked against the filter).
    """

    buckets: frozenset[int] | None = None
    excluded: frozenset[str] = frozenset()

    def covers(self, label: str) -> bool:
        """Whether a split (``partition#bucket``) is in scope."""
        partition, _, bucket = label.rpartition("#")
        if partition in self.excluded:
            return False
        return self.buckets is None or int(bucket) in self.buckets

    def union(self, other: ReadScope) -> ReadScope:
        """The scope of two reads together."""
        buckets = None if self.buckets is None or other.buckets is None else self.buckets | other.buckets
        return ReadScope(buckets, self.excluded & other.excluded)


def read_scope(spec: TableSpec, files: Sequence[FileEntry], parts: FilterParts) -> ReadScope:
    """The scope of a filter read over ``files`` (the table at one version): buckets by its key points,
    partitions by what it rules out among those present."""
    allowed = _allowed_buckets(spec, parts)
    present = {f.partition for f in files}
    excluded = frozenset(p for p in present if not _partition_kept(spec, parts, p))
    return ReadScope(None if allowed is None else frozenset(allowed), excluded)


def _stat_value(v: Any, t: pa.DataType) -> Any:
    """Parquet statistics as Python values comparable with bound literals."""
    if v is None or v != v:  # NaN, or pandas' NaT (see mere.arrays.is_nat): either orders with nothing
        return None
    if pa.types.is_time64(t) and t.unit == "ns":  # pyarrow cuts these to microseconds: a max may fall short
        return None
    if pa.types.is_timestamp(t) and isinstance(v, dt.datetime) and t.tz is not None and v.tzinfo is None:
        return v.replace(tzinfo=dt.UTC)
    if pa.types.is_decimal(t) and not isinstance(v, Decimal):
        return None
    return v


def row_group_stats(
    md: pq.FileMetaData,
    rg: int,
    schema: pa.Schema,
    columns: Sequence[str],
    leaves: Mapping[str, Sequence[int]],
) -> dict[str, E.ColumnStats]:
    """Min/max/null statistics of the top-level primitive ``columns`` in one row group."""
    out: dict[str, E.ColumnStats] = {}
    group = md.row_group(rg)
    for c in columns:
        index = primitive_leaf(md, leaves, c)
        if index is None or c not in schema.names:
            continue
        st = group.column(index).statistics
        if st is None:
            continue
        t = schema.field(c).type
        low = high = None
        if st.has_min_max:
            try:
                low, high = _stat_value(st.min, t), _stat_value(st.max, t)
            except (OverflowError, ValueError):  # e.g. a date past year 9999: no Python value, no pruning
                low = high = None
        out[c] = E.ColumnStats(
            min=None if high is None else low,
            max=None if low is None else high,
            null_count=st.null_count if st.has_null_count else None,
            num_values=group.num_rows,
        )
    return out
