"""S3 (and S3-compatible servers) through ``pyarrow.fs.S3FileSystem``.

- Connections: one S3 client keeps at most 25 connections (the AWS SDK default, which pyarrow does not
  expose), so a pool of ``ceil(max_connections / 25)`` clients serves one warehouse, and files are spread
  over them by path. pyarrow's IO thread pool, which runs every ranged GET and background part upload, is
  raised to ``max_connections`` threads (a process-wide setting that is only ever raised).
- Uploads: a file is encoded into memory first and handed to the store in one call. Below pyarrow's
  multipart threshold (10 MiB) that is a single PutObject: the object appears complete or not at all. From
  10 MiB on, pyarrow uploads 10 MiB parts in the background while the call returns; if a part or the
  completion still fails after the client's retries, nothing becomes visible and the incomplete multipart
  upload is aborted (this needs ``boto3``, from the ``mere[s3]`` extra; without it the upload stays
  pending, invisible, until the bucket's lifecycle rule removes it). Streaming the encoder straight into
  the upload is avoided on purpose: pyarrow's S3 stream completes whatever was written when it is closed
  or garbage-collected, so an encoder failure would publish a truncated object.
"""

from __future__ import annotations

import logging
import math
import threading
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from mere.errors import InvalidInput
from mere.io.options import as_bool, as_bytes, as_int, as_seconds, redact_url

log = logging.getLogger(__name__)

CONNECTIONS_PER_CLIENT = 25  # the AWS SDK's default maxConnections
MULTIPART_THRESHOLD = 10 * 1024 * 1024  # pyarrow: single PutObject below this (with allow_delayed_open)

_io_threads_lock = threading.Lock()


def ensure_io_threads(n: int) -> None:
    """Raise pyarrow's IO thread pool to at least ``n`` threads (never lowers it)."""
    with _io_threads_lock:
        if pa.io_thread_count() < n:
            pa.set_io_thread_count(n)


@dataclass(frozen=True)
class S3Settings:
    """Non-secret S3 settings (safe to log); credentials stay in the filesystem objects only."""

    endpoint: str | None  # host[:port], no scheme
    scheme: str
    region: str
    retries: int
    connect_timeout: float
    request_timeout: float
    max_connections: int
    coalesce_bytes: int
    range_bytes: int
    read_ahead_bytes: int
    virtual_hosted: bool
    anonymous: bool

    @property
    def clients(self) -> int:
        return max(1, math.ceil(self.max_connections / CONNECTIONS_PER_CLIENT))


def parse_settings(opts: Mapping[str, str]) -> S3Settings:
    endpoint = opts.get("endpoint")
    scheme = "https"
    host = None
    if endpoint:
        shape = (
            f"storage option 'endpoint' must look like http(s)://host[:port], got {redact_url(endpoint)!r}"
        )
        try:
            parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
            _ = parts.port  # a port that is not a number raises here
        except ValueError:
            raise InvalidInput(shape) from None
        if (
            parts.scheme not in ("http", "https")
            or not parts.hostname
            or parts.path.strip("/")
            or parts.query
            or parts.fragment
            or parts.username is not None
        ):
            raise InvalidInput(shape)  # a path, query or user would be silently ignored
        host = parts.netloc.rpartition("@")[2]
        scheme = parts.scheme if "://" in endpoint else scheme
    if as_bool("allow_http", opts.get("allow_http", "false")) and (not endpoint or "://" not in endpoint):
        scheme = "http"
    return S3Settings(
        endpoint=host,
        scheme=scheme,
        region=opts.get("region") or "us-east-1",
        retries=as_int("retries", opts.get("retries", "5"), maximum=100),
        connect_timeout=as_seconds("connect_timeout", opts.get("connect_timeout", "5")),
        request_timeout=as_seconds("request_timeout", opts.get("request_timeout", "30")),
        max_connections=as_int("max_connections", opts.get("max_connections", "64"), minimum=1, maximum=4096),
        coalesce_bytes=as_bytes("coalesce_bytes", opts.get("coalesce_bytes", str(1 << 20))),
        range_bytes=as_bytes("range_bytes", opts.get("range_bytes", str(32 << 20))),
        read_ahead_bytes=as_bytes("read_ahead_bytes", opts.get("read_ahead_bytes", str(256 << 20))),
        virtual_hosted=as_bool(
            "virtual_hosted_style_request", opts.get("virtual_hosted_style_request", "false")
        ),
        anonymous=as_bool("anonymous", opts.get("anonymous", "false")),
    )


def _filesystem(settings: S3Settings, opts: Mapping[str, str], *, delayed_open: bool) -> pafs.S3FileSystem:
    kwargs: dict[str, Any] = {
        "region": settings.region,
        "scheme": settings.scheme,
        "connect_timeout": settings.connect_timeout,
        "request_timeout": settings.request_timeout,
        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=settings.retries + 1),
        "allow_delayed_open": delayed_open,
        "allow_bucket_creation": as_bool("allow_bucket_creation", opts.get("allow_bucket_creation", "false")),
        "force_virtual_addressing": settings.virtual_hosted,
    }
    if settings.endpoint:
        kwargs["endpoint_override"] = settings.endpoint  # explicit: pyarrow may ignore AWS_ENDPOINT_URL
    if settings.anonymous:
        kwargs["anonymous"] = True
    else:
        access, secret = opts.get("access_key_id"), opts.get("secret_access_key")
        if bool(access) != bool(secret):
            raise InvalidInput(
                "storage options 'access_key_id' and 'secret_access_key' go together; only one of them is set"
            )
        if access and secret:
            kwargs["access_key"] = access
            kwargs["secret_key"] = secret
            if opts.get("session_token"):
                kwargs["session_token"] = opts["session_token"]
        if opts.get("role_arn"):
            kwargs["role_arn"] = opts["role_arn"]
            if opts.get("role_session_name"):
                kwargs["session_name"] = opts["role_session_name"]
            if opts.get("external_id"):
                kwargs["external_id"] = opts["external_id"]
    if opts.get("ca_file"):
        kwargs["tls_ca_file_path"] = opts["ca_file"]
    if opts.get("proxy"):
        kwargs["proxy_options"] = opts["proxy"]
    try:
        return pafs.S3FileSystem(**kwargs)
    except (TypeError, ValueError, pa.ArrowInvalid) as e:
        # pyarrow's messages name arguments, not their values; keep the cause out of the chain anyway.
        raise InvalidInput(f"invalid S3 storage options: {type(e).__name__}") from None


class S3Pool:
    """The S3 clients of one warehouse: reads spread over ``clients`` by path; uploads use ``small`` (single
    PutObject) or ``large`` (multipart)."""

    def __init__(self, opts: Mapping[str, str]) -> None:
        self.settings = parse_settings(opts)
        ensure_io_threads(self.settings.max_connections)
        n = self.settings.clients
        self.clients = [_filesystem(self.settings, opts, delayed_open=True) for _ in range(n)]
        # Uploads have clients of their own, so their connections stay warm from one write to the next
        # (a write needs at most one connection per bucket file). Small files go up as one PutObject
        # (delayed open); large ones as multipart uploads created at open, so that a failing write() can
        # never fall back to a single-request upload of whatever was buffered.
        self.small = _filesystem(self.settings, opts, delayed_open=True)
        self.large = _filesystem(self.settings, opts, delayed_open=False)
        self._abort_options = {
            k: opts[k] for k in ("access_key_id", "secret_access_key", "session_token") if opts.get(k)
        }

    @property
    def main(self) -> pafs.S3FileSystem:
        return self.clients[0]

    def for_path(self, path: str) -> pafs.S3FileSystem:
        if len(self.clients) == 1:
            return self.clients[0]
        return self.clients[zlib.crc32(path.encode()) % len(self.clients)]

    def for_upload(self, size: int) -> pafs.S3FileSystem:
        return self.large if size >= MULTIPART_THRESHOLD else self.small

    def _boto_client(self, purpose: str) -> Any | None:
        """A boto3 S3 client with this pool's settings, or None (logged) without boto3."""
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            log.warning(
                "cannot %s: install mere[s3] (boto3); a bucket lifecycle rule "
                "(AbortIncompleteMultipartUpload) removes incomplete uploads otherwise",
                purpose,
            )
            return None
        s = self.settings
        kwargs: dict[str, Any] = {
            "region_name": s.region,
            "config": Config(
                retries={"max_attempts": s.retries + 1, "mode": "standard"},
                connect_timeout=s.connect_timeout,
                read_timeout=s.request_timeout,
            ),
        }
        if s.endpoint:
            kwargs["endpoint_url"] = f"{s.scheme}://{s.endpoint}"
        if "access_key_id" in self._abort_options:
            kwargs["aws_access_key_id"] = self._abort_options["access_key_id"]
            kwargs["aws_secret_access_key"] = self._abort_options["secret_access_key"]
            kwargs["aws_session_token"] = self._abort_options.get("session_token")
        return boto3.session.Session().client("s3", **kwargs)

    def abort_incomplete_uploads(self, path: str) -> int:
        """Abort pending multipart uploads of exactly this key (best effort; needs boto3). Returns the count."""
        bucket, _, key = path.partition("/")
        aborted = 0
        try:
            client = self._boto_client(f"abort the incomplete multipart upload of {path}")
            if client is None:
                return 0
            listing = client.list_multipart_uploads(Bucket=bucket, Prefix=key)
            for upload in listing.get("Uploads", []):
                if upload.get("Key") == key:
                    client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload["UploadId"])
                    aborted += 1
        except Exception as e:  # best effort: the upload is invisible and unreferenced anyway
            log.warning("could not abort the incomplete multipart upload of %s: %s", path, type(e).__name__)
        return aborted

    def abort_stale_uploads(
        self, prefix: str, initiated_before: float, wanted: Callable[[str], bool]
    ) -> list[str]:
        """Abort multipart uploads under ``bucket/prefix`` started before a time (epoch seconds) whose keys
        ``wanted`` accepts: what killed writers left pending, invisible but billed. Returns the
        ``bucket/key`` paths whose uploads went."""
        bucket, _, key_prefix = prefix.partition("/")
        client = self._boto_client(f"abort stale multipart uploads under {prefix}")
        if client is None:
            return []
        aborted: list[str] = []
        for page in client.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, Prefix=key_prefix):
            for upload in page.get("Uploads", []):
                # (Initiated may be whole seconds, as LastModified is: a second later is never too early)
                if upload["Initiated"].timestamp() + 1.0 < initiated_before and wanted(upload["Key"]):
                    client.abort_multipart_upload(
                        Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                    )
                    aborted.append(f"{bucket}/{upload['Key']}")
        return aborted
