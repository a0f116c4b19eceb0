"""One storage module for every warehouse URI: local paths, ``file://``, ``s3://`` and what ``pyarrow.fs`` reaches.

Files are immutable and named uniquely, so nothing here renames or lists to make data visible: a file
becomes part of a table only through the catalog transaction. What this module adds on object stores:

- no HEAD requests: the catalog knows every file's size, so a footer costs one ranged GET (key
  lookups' small ranged reads, :meth:`Storage.read_ranges`, open a file once with one);
- footers cached per file; row groups fetched with their byte ranges coalesced (``coalesce_bytes``)
  and requested all at once (pre-buffering), on a pool of connections (``max_connections``);
- uploads that either complete or never become visible, with retries (see :mod:`mere.io.s3`);
- transient errors retried with backoff, by the S3 client per request and here per file operation.

Storage moves bytes: what goes into a Parquet file is :mod:`mere.io.parquet`'s choice (encodings, key
index, metadata), and what a footer says about its columns :mod:`mere.io.footer`'s.

``storage_options`` keys are documented in ``docs/storage.md`` (and :mod:`mere.io.options`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlparse

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from mere.concurrency import shared_pool
from mere.errors import InvalidInput, StorageError
from mere.io.footer import Footer, relaxed
from mere.io.options import canonical, redact, resolve_options
from mere.io.retry import is_transient, is_transient_read, with_retries
from mere.io.s3 import MULTIPART_THRESHOLD, S3Pool, ensure_io_threads

if TYPE_CHECKING:
    import pyarrow.dataset as ds

T = TypeVar("T")

__all__ = ["ByteBudget", "IOStats", "Storage", "redact", "resolve"]

log = logging.getLogger(__name__)

RANGE_GAP_BYTES = 16 << 10  # object stores: ranges this close are fetched in one request
READ_ATTEMPTS = 4  # whole-read attempts on object stores, on top of the S3 client's per-request retries
WRITE_ATTEMPTS = 3  # whole-upload attempts (same key, same bytes: idempotent)
_REMOTE_IO_THREADS = 32


def _is_local_uri(uri: str) -> bool:
    parsed = urlparse(uri)
    return parsed.scheme in ("", "file") or (len(parsed.scheme) == 1 and os.name == "nt")


def resolve(uri: str, storage_options: Mapping[str, str] | None = None) -> tuple[pafs.FileSystem, str]:
    """Map a warehouse URI to a filesystem and a root path inside it."""
    if _is_local_uri(uri):
        parsed = urlparse(uri)
        path = parsed.path if parsed.scheme == "file" else uri
        return pafs.LocalFileSystem(), os.path.abspath(path)
    parsed = urlparse(uri)
    if parsed.scheme in ("s3", "s3a"):
        return S3Pool(resolve_options(storage_options)).main, _s3_root(uri)
    return _other_filesystem(uri, storage_options)


def _s3_root(uri: str) -> str:
    parsed = urlparse(uri)
    if not parsed.netloc:
        raise InvalidInput(f"warehouse {uri!r} names no bucket: use s3://bucket/path")
    return f"{parsed.netloc}{parsed.path}".rstrip("/")


def _other_filesystem(uri: str, storage_options: Mapping[str, str] | None) -> tuple[pafs.FileSystem, str]:
    """gs://, abfs://, hdfs://, ... through pyarrow; with storage_options through fsspec when installed."""
    if storage_options:
        try:
            import fsspec
        except ImportError:
            fsspec = None
        if fsspec is not None:
            protocol = urlparse(uri).scheme
            fs = fsspec.filesystem(protocol, **dict(storage_options))
            root = fs._strip_protocol(uri).rstrip("/")
            return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), root
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except (pa.ArrowInvalid, ValueError, OSError) as e:
        raise InvalidInput(f"cannot open warehouse {uri!r}: {e}") from e
    if storage_options:
        log.warning(
            "storage_options are ignored for %s (only s3:// reads them; install fsspec for others)",
            urlparse(uri).scheme,
        )
    return fs, path.rstrip("/")


@dataclass
class IOStats:
    """What this storage fetched and wrote: footers plus the column chunks of the row groups read."""

    bytes_read: int = 0
    footers_read: int = 0
    row_groups_read: int = 0
    files_written: int = 0
    bytes_written: int = 0
    retries: int = 0

    def reset(self) -> None:
        self.bytes_read = self.footers_read = self.row_groups_read = 0
        self.files_written = self.bytes_written = self.retries = 0


class ByteBudget:
    """Bytes a process may hold fetched ahead of need (read-ahead). ``try_acquire`` never blocks: read-ahead
    is skipped when the budget is spent, so readers never wait on each other (no deadlock), and memory
    stays bounded."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.peak = 0
        self._lock = threading.Lock()

    def try_acquire(self, n: int) -> bool:
        with self._lock:
            if n <= 0:
                return True
            if self.used + n > self.limit:
                return False
            self.used += n
            self.peak = max(self.peak, self.used)
            return True

    def release(self, n: int) -> None:
        if n > 0:
            with self._lock:
                self.used = max(0, self.used - n)


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
        self._s3: S3Pool | None = None
        self.portable = filesystem is None  # another process can open it again from the URI and options
        scheme = urlparse(uri).scheme
        if filesystem is not None:
            self.fs, self.root = filesystem, (_s3_root(uri) if scheme in ("s3", "s3a") else uri.rstrip("/"))
            if not _is_local_uri(uri) or not isinstance(filesystem, pafs.LocalFileSystem):
                ensure_io_threads(_REMOTE_IO_THREADS)
        elif scheme in ("s3", "s3a"):
            self._s3 = S3Pool(resolve_options(self.storage_options))
            self.fs, self.root = self._s3.main, _s3_root(uri)
        else:
            if _is_local_uri(uri):
                canonical(self.storage_options)  # still reject unknown keys
            self.fs, self.root = resolve(uri, self.storage_options)
            if not isinstance(self.fs, pafs.LocalFileSystem):
                ensure_io_threads(_REMOTE_IO_THREADS)
        self.is_local = isinstance(self.fs, pafs.LocalFileSystem)
        self.table: str | None = None  # the table a handle from for_table() reads for, named in read errors
        self._footers: OrderedDict[str, Footer] = OrderedDict()
        self._footer_cache_size = footer_cache_size
        self._lock = threading.Lock()
        self.stats = IOStats()
        s = self._s3.settings if self._s3 is not None else None
        self.coalesce_bytes = s.coalesce_bytes if s else 1 << 20
        self.range_bytes = s.range_bytes if s else 32 << 20
        # Read-ahead budget for scans (bytes fetched but not merged yet), and concurrent file reads.
        self.read_ahead_bytes = s.read_ahead_bytes if s else 256 << 20
        self.read_ahead = ByteBudget(self.read_ahead_bytes)
        self.max_connections = s.max_connections if s else 16
        self._format: ds.ParquetFileFormat | None = None
        if not self.is_local:
            import pyarrow.dataset as ds  # object stores only: importing it also imports pandas

            self._format = ds.ParquetFileFormat(
                default_fragment_scan_options=ds.ParquetFragmentScanOptions(
                    pre_buffer=True,
                    cache_options=pa.CacheOptions(
                        hole_size_limit=self.coalesce_bytes,
                        range_size_limit=max(self.range_bytes, self.coalesce_bytes),
                        lazy=False,
                    ),
                )
            )

    def __repr__(self) -> str:
        return f"Storage({self.uri!r}, storage_options={redact(self.storage_options)})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuild from the URI and options rather than pickling filesystem objects.
        args = (self.uri, self.storage_options, None if self._s3 is not None else self._user_fs())
        return (Storage, args, {"table": self.table})

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        self.table = state.get("table")

    def for_table(self, name: str) -> Storage:
        """This storage (the same filesystem, footer cache, statistics and budgets) for reading one table's
        files: every read failure names the table as well as the file."""
        if name == self.table:
            return self
        view = object.__new__(Storage)
        view.__dict__.update(self.__dict__)  # shares every member; copy.copy would rebuild via __reduce__
        view.table = name
        return view

    def _read_failed(self, what: str, error: BaseException | str) -> StorageError:
        """The one error of a failed read of a data file: which file, of which table, and why."""
        of = f" (a data file of table {self.table})" if self.table else ""
        why = error if isinstance(error, str) else _first_line(error)
        return StorageError(f"{what}{of} failed: {why}")

    def _user_fs(self) -> pafs.FileSystem | None:
        return None if self.is_local and _is_local_uri(self.uri) else self.fs

    @property
    def is_remote(self) -> bool:
        return not self.is_local

    def full_path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def file_uri(self, rel: str) -> str:
        """Where another engine finds the file: ``file:///abs/path`` locally, ``s3://bucket/key`` on S3
        (engines that need ``s3a://`` map the scheme). Not percent-encoded, as Hadoop paths expect."""
        if self.is_local:
            return "file://" + self.full_path(rel)
        scheme = urlparse(self.uri).scheme or "s3"
        return f"{'s3' if scheme == 's3a' else scheme}://{self.full_path(rel)}"

    def makedirs(self, rel: str) -> None:
        if self.is_local:
            os.makedirs(self.full_path(rel), exist_ok=True)

    def _fs_for(self, path: str) -> pafs.FileSystem:
        return self._s3.for_path(path) if self._s3 is not None else self.fs

    def _retrying(self, what: str, operation: Callable[[], T], *, read: bool = False) -> T:
        def count(_: BaseException) -> None:
            with self._lock:
                self.stats.retries += 1

        attempts = (READ_ATTEMPTS if read else WRITE_ATTEMPTS) if self.is_remote else 1
        return with_retries(
            operation,
            attempts=attempts,
            what=lambda: what,
            on_retry=count,
            retry_if=is_transient_read if read else is_transient,
        )

    def _reading(self, what: str, operation: Callable[[], T]) -> T:
        """A read of a data file with retries; whatever fails (the storage, or decoding a missing, truncated
        or foreign file) becomes one StorageError naming the file and the table."""
        try:
            return self._retrying(what, operation, read=True)
        except _READ_ERRORS as e:
            raise self._read_failed(what, e) from e

    # -- writes ------------------------------------------------------------------------------------

    def write(self, rel: str, encode: Callable[[pa.NativeFile], None]) -> int:
        """Write a new file at a path that must not exist yet: ``encode`` writes its bytes to the stream it
        is given. Returns the file's size in bytes.

        On object stores the bytes are gathered in memory, then uploaded (multipart from 10 MiB, parts in
        parallel): the object appears whole or not at all, and a failed upload leaves nothing behind. A
        failed local write removes its partial file.
        """
        path = self.full_path(rel)
        if self.is_remote:
            sink = pa.BufferOutputStream()
            encode(sink)
            data = sink.getvalue()
            self._upload(path, data)
            size = data.size
        else:
            try:
                os.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
                try:
                    with self.fs.open_output_stream(path) as out:
                        encode(out)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.remove(path)  # a partial local file: never referenced, remove it now
                    raise
                size = os.path.getsize(path)
            except OSError as e:
                raise StorageError(f"writing {path} failed: {e}") from e
        with self._lock:
            self.stats.files_written += 1
            self.stats.bytes_written += int(size)
        return int(size)

    def _upload(self, path: str, data: pa.Buffer) -> None:
        """Put finished bytes at ``path``: the object appears whole or not at all."""

        def once() -> None:
            fs = self._s3.for_upload(data.size) if self._s3 is not None else self.fs
            out = fs.open_output_stream(path)  # multipart uploads are created here, before any data
            try:
                out.write(data)  # one call: the whole file is queued (parts upload in the background)
            finally:
                out.close()  # waits for the parts; completes the object only if every part succeeded

        try:
            self._retrying(f"uploading {path}", once)
        except OSError as e:
            self._discard_failed_upload(path, data.size)
            raise StorageError(f"writing {path} failed: {_first_line(e)}") from e

    def _discard_failed_upload(self, path: str, size: int) -> None:
        if self._s3 is not None and size >= MULTIPART_THRESHOLD:
            self._s3.abort_incomplete_uploads(path)
        with contextlib.suppress(OSError):
            # A completion whose response was lost may have published the object: it is unreferenced.
            self.fs.delete_file(path)

    # -- reads -------------------------------------------------------------------------------------

    def _footer(self, rel: str, size: int | None = None) -> Footer:
        with self._lock:
            entry = self._footers.get(rel)
            if entry is not None:
                self._footers.move_to_end(rel)
                return entry
        path = self.full_path(rel)

        def read() -> Footer:
            if self._format is None:
                with self.fs.open_input_file(path) as f:
                    return Footer(pq.read_metadata(f), None)
            # A fragment with a known size reads the footer with one ranged GET (no HEAD).
            fragment = self._format.make_fragment(path, self._fs_for(path), file_size=size or None)
            fragment.ensure_complete_metadata()
            return Footer(fragment.metadata, fragment)

        entry = self._reading(f"reading the footer of {path}", read)
        md = entry.metadata
        footer = md.serialized_size + 8
        if size:
            footer = min(size, footer)
        with self._lock:
            self.stats.bytes_read += footer
            self.stats.footers_read += 1
            self._footers[rel] = entry
            while len(self._footers) > self._footer_cache_size:
                self._footers.popitem(last=False)
        return entry

    def footer(self, rel: str, size: int | None = None) -> Footer:
        """A file's parsed footer with what readers derive from it (its metadata, column leaves and cache
        dict, as the three methods below give them one by one)."""
        return self._footer(rel, size)

    def metadata(self, rel: str, size: int | None = None) -> pq.FileMetaData:
        """Parquet footer, cached per path (files are immutable). ``size`` (from the catalog) saves a HEAD."""
        return self._footer(rel, size).metadata

    def column_leaves(self, rel: str, size: int | None = None) -> dict[str, list[int]]:
        """Top-level column name -> its Parquet leaf indices in this file (cached with the footer)."""
        return self._footer(rel, size).leaves

    def file_cache(self, rel: str, size: int | None = None) -> dict[str, Any]:
        """A dict kept (and dropped) with the file's cached footer, for what readers derive from it."""
        return self._footer(rel, size).extra

    def read_ranges(
        self, rel: str, ranges: Sequence[tuple[int, int]], size: int | None = None
    ) -> list[bytes]:
        """The bytes of ``(offset, length)`` ranges of one file (index structures, single pages).

        Overlapping and adjacent ranges are fetched once (on object stores also ranges less than
        ``RANGE_GAP_BYTES`` apart); the bytes fetched are counted in ``stats.bytes_read``.
        """
        if not ranges:
            return []
        path = self.full_path(rel)
        gap = RANGE_GAP_BYTES if self.is_remote else 0
        spans: list[list[int]] = []  # [start, end] of each fetch
        for start, length in sorted(set(ranges)):
            if spans and start <= spans[-1][1] + gap:
                spans[-1][1] = max(spans[-1][1], start + length)
            else:
                spans.append([start, start + length])

        extra = self._footer(rel, size).extra

        def read() -> list[bytes]:
            if self.is_local:
                with self.fs.open_input_file(path) as f:
                    return [f.read_at(end - start, start) for start, end in spans]
            # pyarrow opens object-store files with a HEAD (it takes no known size here): keep the
            # handle with the footer, so a file costs that once, not once per read.
            f = extra.get("input")
            if f is None:
                f = extra["input"] = self._fs_for(path).open_input_file(path)
            try:
                if len(spans) == 1:
                    return [f.read_at(spans[0][1] - spans[0][0], spans[0][0])]
                # Pages of different columns lie apart: one request each, all in flight at once. The
                # pool's tasks wait on nothing, so callers on other pools may wait on them.
                pool = shared_pool("ranges", self.max_connections)
                return list(pool.map(lambda span: f.read_at(span[1] - span[0], span[0]), spans))
            except OSError:
                extra.pop("input", None)  # a retry opens it again
                raise

        blobs = self._reading(f"reading {path}", read)
        if any(len(b) != end - start for b, (start, end) in zip(blobs, spans)):
            raise self._read_failed(f"reading {path}", "ranges beyond the end of the file (truncated?)")
        with self._lock:
            self.stats.bytes_read += sum(end - start for start, end in spans)
        starts = [s[0] for s in spans]
        out = []
        for start, length in ranges:
            i = int(np.searchsorted(starts, start, side="right")) - 1
            base = spans[i][0]
            out.append(blobs[i][start - base : start - base + length])
        return out

    def prefetch_metadata(
        self, files: Iterable[tuple[str, int | None]], pool: ThreadPoolExecutor | None = None
    ) -> None:
        """Fetch the footers of several files concurrently (those not cached yet)."""
        with self._lock:
            todo = [(rel, size) for rel, size in files if rel not in self._footers]
        if len(todo) <= 1 or pool is None:
            for rel, size in todo:
                self._footer(rel, size)
            return
        for f in [pool.submit(self._footer, rel, size) for rel, size in todo]:
            f.result()

    def read_row_groups(
        self,
        rel: str,
        row_groups: Sequence[int],
        columns: Sequence[str] | None,
        size: int | None = None,
        dictionary: Sequence[str] = (),
        use_threads: bool = True,
    ) -> pa.Table:
        """Read some row groups of one file (in the given order), only the given columns (those it has).

        ``dictionary`` columns may come back dictionary-encoded (local and pyarrow filesystems), which saves
        materialising values of rows a merge drops; callers cast them to their plain type.
        ``use_threads=False`` decodes on the calling thread instead of pyarrow's CPU pool.
        """
        entry = self._footer(rel, size)
        groups = list(row_groups)
        path = self.full_path(rel)
        names, leaves, as_dictionary, stored = entry.read_layout(columns, dictionary)
        if self.is_local:
            try:
                with self.fs.open_input_file(path) as f:
                    # pyarrow's reader directly, no retries (a local read is tried once): per file this is
                    # Python under the GIL, which bounds how many small files a scan decodes per second.
                    reader = pq.ParquetReader()
                    # No coalesced prefetch: on local disk it is an extra copy (~5% of a scan).
                    reader.open(
                        f,
                        metadata=entry.metadata,
                        pre_buffer=False,
                        read_dictionary=as_dictionary or None,
                        arrow_extensions_enabled=True,
                    )
                    table = reader.read_row_groups(groups, column_indices=leaves, use_threads=use_threads)
            except _READ_ERRORS as e:
                raise self._read_failed(f"reading {path}", e) from e
        else:
            fragment = entry.fragment
            assert fragment is not None  # object stores read footers through fragments

            def read() -> pa.Table:
                # One request per coalesced byte range, all issued at once; no HEAD, no footer re-read.
                part = fragment.subset(row_group_ids=groups)
                return part.to_table(columns=names, use_threads=use_threads, batch_size=1 << 30)

            table = self._reading(f"reading {path}", read)
        with self._lock:
            self.stats.bytes_read += sum(stored[i] for i in groups)
            self.stats.row_groups_read += len(groups)
        return relaxed(table, entry.made_required)  # columns made required hand back nullable, as written

    def clear_cache(self) -> None:
        with self._lock:
            self._footers.clear()

    # -- housekeeping ------------------------------------------------------------------------------

    def delete(self, rel: str) -> None:
        path = self.full_path(rel)

        def once() -> None:
            with contextlib.suppress(FileNotFoundError):
                self.fs.delete_file(path)

        try:
            self._retrying(f"deleting {path}", once)
        except OSError as e:
            raise StorageError(f"deleting {path} failed: {_first_line(e)}") from e
        with self._lock:
            self._footers.pop(rel, None)

    def discard(self, rels: Iterable[str]) -> None:
        """Delete files nothing references (uncommitted writes), best effort: what stays is garbage that
        ``Table.cleanup`` removes later, never a broken table."""
        for rel in rels:
            try:
                self.delete(rel)
            except Exception:
                log.warning("could not delete uncommitted file %s", rel)

    def missing(self, rels: Sequence[str]) -> list[str]:
        """The files of ``rels`` that do not exist (one metadata request each on an object store, run
        concurrently). For commits of files written elsewhere, long before: a cleanup may have taken them."""
        if not self.is_remote:
            return [r for r in rels if not os.path.isfile(self.full_path(r))]

        def gone(rel: str) -> bool:
            path = self.full_path(rel)
            info = self._retrying(
                f"looking up {path}", lambda: self._fs_for(path).get_file_info(path), read=True
            )
            return bool(info.type == pafs.FileType.NotFound)

        try:
            found = list(shared_pool("ranges", self.max_connections).map(gone, rels))
        except OSError as e:
            raise StorageError(f"looking up files to commit failed: {_first_line(e)}") from e
        return [r for r, g in zip(rels, found) if g]

    def written_micros(self, rels: Sequence[str]) -> list[int | None]:
        """Each file's time as :meth:`list_files` gives it (the store's clock: what a cleanup compares with
        its cutoff), in microseconds; None for a file that does not exist. One metadata request each on an
        object store, run concurrently."""
        late = 1.0 if self.is_remote else 0.0

        def written(rel: str) -> int | None:
            path = self.full_path(rel)
            if not self.is_remote:
                try:
                    return int(os.stat(path).st_mtime * 1e6) - 1  # floored: never after the file's time
                except FileNotFoundError:
                    return None
            info = self._retrying(
                f"looking up {path}", lambda: self._fs_for(path).get_file_info(path), read=True
            )
            if info.type == pafs.FileType.NotFound:
                return None
            return int(((info.mtime.timestamp() if info.mtime is not None else 0.0) + late) * 1e6) - 1

        try:
            return list(shared_pool("ranges", self.max_connections).map(written, rels))
        except OSError as e:
            raise StorageError(f"looking up files to commit failed: {_first_line(e)}") from e

    def list_files(self, rel_dir: str) -> list[tuple[str, int, float]]:
        """Every file below a directory: (relative path, size, mtime seconds, never before the file was
        written). Maintenance only: commits and reads never list."""
        base = self.full_path(rel_dir)
        selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
        try:
            infos = self._retrying(f"listing {base}", lambda: self.fs.get_file_info(selector))
        except OSError as e:
            raise StorageError(f"listing {base} failed: {_first_line(e)}") from e
        out = []
        prefix = self.root + "/"
        # Object stores give whole seconds (S3's LastModified): a second later is never before the write
        # ended, so a cleanup's cutoff never takes a file written after it.
        late = 1.0 if self.is_remote else 0.0
        for info in infos:
            if info.type == pafs.FileType.File:
                rel = info.path[len(prefix) :] if info.path.startswith(prefix) else info.path
                mtime = info.mtime.timestamp() if info.mtime is not None else 0.0
                out.append((rel, int(info.size or 0), mtime + late))
        return out

    def delete_tree(self, rel_dir: str) -> list[str]:
        """Delete the files mere wrote below a directory (a dropped table's), and the directory with them
        when nothing else is left in it. Returns the files left: those mere did not write stay, with their
        folders."""
        base = self.full_path(rel_dir)
        listed = [path for path, _, _ in self.list_files(rel_dir)]
        foreign = [path for path in listed if not self.made_by_mere(path)]
        # File by file, never the folder at once: an object put there after the listing, or one an
        # object store lists as a folder (a key ending in '/'), is someone else's and stays.
        ours = [path for path in listed if self.made_by_mere(path)]
        list(shared_pool("ranges", self.max_connections).map(self.delete, ours))
        if self.is_local:
            _remove_empty_folders(base)
        with self._lock:
            for rel in [r for r in self._footers if r.startswith(rel_dir.rstrip("/") + "/")]:
                self._footers.pop(rel, None)
        return foreign

    def abort_stale_uploads(self, rel_dir: str, initiated_before: float) -> list[str]:
        """Abort multipart uploads below a directory started before a time (object stores; nothing to do
        elsewhere). Returns their relative paths. Maintenance only."""
        if self._s3 is None:
            return []
        base = self.full_path(rel_dir).rstrip("/") + "/"
        try:
            paths = self._s3.abort_stale_uploads(base, initiated_before, self.made_by_mere)
        except Exception as e:
            raise StorageError(f"aborting stale uploads under {base} failed: {_first_line(e)}") from e
        prefix = self.root + "/"
        return [p[len(prefix) :] if p.startswith(prefix) else p for p in paths]

    @staticmethod
    def unique_name(prefix: str = "part", write_id: str | None = None) -> str:
        """A new file name; with ``write_id`` (no ``-`` in it) the name carries it: ``part-<id>-<uuid>``."""
        if write_id is None:
            return f"{prefix}-{uuid.uuid4().hex}.parquet"
        return f"{prefix}-{write_id}-{uuid.uuid4().hex}.parquet"

    @staticmethod
    def made_by_mere(rel: str) -> bool:
        """Whether a path's base name is one :meth:`unique_name` gives: maintenance deletes no other file."""
        return _MERE_FILE.fullmatch(rel.rsplit("/", 1)[-1]) is not None

    @staticmethod
    def named_for(write_id: str) -> re.Pattern[str]:
        """What the names :meth:`unique_name` gives for ``write_id`` match (the base name, whole)."""
        return re.compile(rf"{_PREFIXES}-{re.escape(write_id)}-[0-9a-f]{{32}}\.parquet")


# The base names :meth:`Storage.unique_name` gives (with or without a write id; every mere so far): data,
# delete-marker and change-log files.
_PREFIXES = "(?:part|del|log)"
_MERE_FILE = re.compile(rf"{_PREFIXES}-(?:[A-Za-z0-9_]{{1,64}}-)?[0-9a-f]{{32}}\.parquet")


def _remove_empty_folders(top: str) -> None:
    """Remove the folders below ``top`` (and ``top``) that hold nothing, deepest first (local disks)."""
    for folder, _, _ in os.walk(top, topdown=False):
        with contextlib.suppress(OSError):  # not empty: a file mere did not write is in it
            os.rmdir(folder)


# What reading a data file raises when it is missing, unreadable, truncated or not mere's Parquet: pyarrow's
# decoder errors (ArrowInvalid "Parquet magic bytes not found", thrift and page errors) included.
_READ_ERRORS = (OSError, EOFError, pa.ArrowException)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
