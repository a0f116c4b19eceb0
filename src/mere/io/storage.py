"""One storage module for every warehouse URI: local paths, ``file://`` and anything ``pyarrow.fs`` reaches."""

from __future__ import annotations

import os
import threading
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from mere.errors import InvalidInput, StorageError

_SECRET_KEYS = ("secret", "password", "token", "key_id", "access_key")


def redact(options: Mapping[str, str]) -> dict[str, str]:
    """Storage options with secrets hidden, for reprs and messages."""
    return {k: ("***" if any(s in k.lower() for s in _SECRET_KEYS) else v) for k, v in options.items()}


def _truthy(value: str | None) -> bool:
    return str(value).lower() in ("1", "true", "yes", "on")


def _s3_filesystem(options: Mapping[str, str]) -> pafs.FileSystem:
    opts = {k.lower(): v for k, v in options.items()}

    def pick(*names: str) -> str | None:
        for n in names:
            if opts.get(n):
                return opts[n]
        for n in names:
            env = os.environ.get(n.upper())
            if env:
                return env
        return None

    kwargs: dict[str, object] = {}
    endpoint = pick("aws_endpoint", "aws_endpoint_url", "endpoint", "endpoint_url")
    if endpoint:
        parsed = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}")
        kwargs["endpoint_override"] = parsed.netloc
        kwargs["scheme"] = parsed.scheme
    if _truthy(pick("allow_http")):
        kwargs["scheme"] = "http"
    access = pick("aws_access_key_id", "access_key_id")
    secret = pick("aws_secret_access_key", "secret_access_key")
    if access and secret:
        kwargs["access_key"] = access
        kwargs["secret_key"] = secret
        token = pick("aws_session_token", "session_token")
        if token:
            kwargs["session_token"] = token
    region = pick("aws_region", "region", "aws_default_region")
    kwargs["region"] = region or "us-east-1"
    for key, arg in (("connect_timeout", "connect_timeout"), ("request_timeout", "request_timeout")):
        if opts.get(key):
            kwargs[arg] = float(opts[key])
    if opts.get("retries"):
        kwargs["retry_strategy"] = pafs.AwsStandardS3RetryStrategy(max_attempts=int(opts["retries"]))
    kwargs["allow_bucket_creation"] = _truthy(opts.get("allow_bucket_creation", "false"))
    return pafs.S3FileSystem(**kwargs)


def resolve(uri: str, storage_options: Mapping[str, str] | None = None) -> tuple[pafs.FileSystem, str]:
    """Map a warehouse URI to a filesystem and a root path inside it."""
    options = dict(storage_options or {})
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file") or (len(parsed.scheme) == 1 and os.name == "nt"):
        path = parsed.path if parsed.scheme == "file" else uri
        return pafs.LocalFileSystem(), os.path.abspath(path)
    if parsed.scheme in ("s3", "s3a"):
        return _s3_filesystem(options), f"{parsed.netloc}{parsed.path}".rstrip("/")
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, ValueError) as e:
        raise InvalidInput(f"cannot open warehouse {uri!r}: {e}") from e
    return fs, path.rstrip("/")


def _delta_encoding(t: pa.DataType) -> str | None:
    if pa.types.is_integer(t) or pa.types.is_date32(t) or pa.types.is_timestamp(t):
        return "DELTA_BINARY_PACKED"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "DELTA_BYTE_ARRAY"
    return None


@dataclass
class IOStats:
    """Bytes and requests this storage fetched: footers plus the column chunks of the row groups read."""

    bytes_read: int = 0
    footers_read: int = 0
    row_groups_read: int = 0

    def reset(self) -> None:
        self.bytes_read = self.footers_read = self.row_groups_read = 0


@dataclass(frozen=True)
class WrittenFile:
    path: str  # relative to the storage root
    size_bytes: int
    row_count: int


class Storage:
    """Files under one root. Paths given to methods are relative to the root, with '/' separators."""

    def __init__(
        self,
        uri: str,
        storage_options: Mapping[str, str] | None = None,
        filesystem: pafs.FileSystem | None = None,
        footer_cache_size: int = 4096,
    ) -> None:
        self.uri = uri
        self.storage_options = dict(storage_options or {})
        if filesystem is not None:
            self.fs, self.root = filesystem, uri.rstrip("/")
        else:
            self.fs, self.root = resolve(uri, self.storage_options)
        self.is_local = isinstance(self.fs, pafs.LocalFileSystem)
        self._footers: OrderedDict[str, pq.FileMetaData] = OrderedDict()
        self._footer_cache_size = footer_cache_size
        self._lock = threading.Lock()
        self.stats = IOStats()

    def __repr__(self) -> str:
        return f"Storage({self.uri!r}, storage_options={redact(self.storage_options)})"

    def full_path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def makedirs(self, rel: str) -> None:
        if self.is_local:
            os.makedirs(self.full_path(rel), exist_ok=True)

    def write_parquet(
        self,
        rel: str,
        table: pa.Table,
        *,
        row_group_rows: int,
        sorting_columns: Sequence[str] = (),
        compression: str = "zstd",
        compression_level: int | None = None,
    ) -> WrittenFile:
        """Write one Parquet file (zstd, statistics) at a path that must not exist yet.

        Sort columns are delta-encoded instead of dictionary-encoded: sorted, mostly unique keys shrink
        to a few bits each, which keeps key lookups (that read key columns first) cheap.
        """
        path = self.full_path(rel)
        parent = path.rsplit("/", 1)[0]
        sorting = None
        if sorting_columns:
            sorting = [pq.SortingColumn(table.schema.get_field_index(c)) for c in sorting_columns]
        try:
            if self.is_local:
                os.makedirs(parent, exist_ok=True)
            encodings = {c: e for c in sorting_columns if (e := _delta_encoding(table.schema.field(c).type))}
            dictionary = [c for c in table.column_names if c not in encodings] if encodings else True
            with self.fs.open_output_stream(path) as sink, pq.ParquetWriter(
                sink,
                table.schema,
                compression=compression,
                compression_level=compression_level,
                write_statistics=True,
                sorting_columns=sorting,
                use_dictionary=dictionary,
                column_encoding=encodings or None,
                store_schema=False,  # readers cast to the table schema; dictionary columns read as plain
            ) as writer:
                writer.write_table(table, row_group_size=row_group_rows)
            size = self.fs.get_file_info(path).size
        except OSError as e:
            raise StorageError(f"writing {self._show(path)} failed: {e}") from e
        return WrittenFile(rel, int(size or 0), table.num_rows)

    def metadata(self, rel: str) -> pq.FileMetaData:
        """Parquet footer, cached per path (files are immutable)."""
        with self._lock:
            md = self._footers.get(rel)
            if md is not None:
                self._footers.move_to_end(rel)
                return md
        try:
            with self.fs.open_input_file(self.full_path(rel)) as f:
                md = pq.read_metadata(f)
                footer = min(f.size(), md.serialized_size + 8)
        except OSError as e:
            raise StorageError(f"reading footer of {self._show(self.full_path(rel))} failed: {e}") from e
        with self._lock:
            self.stats.bytes_read += footer
            self.stats.footers_read += 1
            self._footers[rel] = md
            while len(self._footers) > self._footer_cache_size:
                self._footers.popitem(last=False)
        return md

    def read_row_groups(self, rel: str, row_groups: Sequence[int], columns: Sequence[str] | None) -> pa.Table:
        """Read some row groups of one file, only the given columns (those the file has)."""
        md = self.metadata(rel)
        try:
            with self.fs.open_input_file(self.full_path(rel)) as f:
                pf = pq.ParquetFile(f, metadata=md, pre_buffer=True)
                cols = None if columns is None else [c for c in columns if c in md.schema.names]
                table = pf.read_row_groups(list(row_groups), columns=cols, use_threads=True)
            self._count(md, row_groups, cols)
            return table
        except OSError as e:
            raise StorageError(f"reading {self._show(self.full_path(rel))} failed: {e}") from e

    def _count(self, md: pq.FileMetaData, row_groups: Sequence[int], columns: Sequence[str] | None) -> None:
        names = md.schema.names
        wanted = range(len(names)) if columns is None else [names.index(c) for c in columns]
        size = 0
        for i in row_groups:
            rg = md.row_group(i)
            size += sum(rg.column(j).total_compressed_size for j in wanted)
        with self._lock:
            self.stats.bytes_read += size
            self.stats.row_groups_read += len(row_groups)

    def delete(self, rel: str) -> None:
        try:
            self.fs.delete_file(self.full_path(rel))
        except FileNotFoundError:
            pass
        except OSError as e:
            raise StorageError(f"deleting {self._show(self.full_path(rel))} failed: {e}") from e

    def list_files(self, rel_dir: str) -> list[tuple[str, int, float]]:
        """Every file below a directory: (relative path, size, mtime seconds)."""
        base = self.full_path(rel_dir)
        selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
        out = []
        prefix = self.root + "/"
        for info in self.fs.get_file_info(selector):
            if info.type == pafs.FileType.File:
                rel = info.path[len(prefix):] if info.path.startswith(prefix) else info.path
                mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
                out.append((rel, int(info.size or 0), mtime))
        return out

    @staticmethod
    def unique_name(prefix: str = "part") -> str:
        return f"{prefix}-{uuid.uuid4().hex}.parquet"

    def _show(self, path: str) -> str:
        return path
