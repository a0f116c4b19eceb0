"""Retries with exponential backoff for transient storage errors.

The S3 client already retries every request (``storage_options['retries']``); this layer retries a whole
idempotent operation (reading some row groups of an immutable file, uploading a finished file under its
unique name) once more when the client gave up on an error that may go away.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from mere.retry import RetryPolicy

log = logging.getLogger(__name__)

T = TypeVar("T")

# Errors that will not go away by asking again.
_PERMANENT = (
    "AccessDenied",
    "Access Denied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "NoSuchBucket",
    "NoSuchKey",
    "NoSuchUpload",
    "Path does not exist",
    "InvalidBucketName",
    "InvalidArgument",
    "HTTP status 400",
    "HTTP status 401",
    "HTTP status 403",
    "HTTP status 404",
    "HTTP status 405",
    "HTTP status 412",
    # AWS SDK error names as pyarrow prints them ("AWS Error ACCESS_DENIED during ...")
    "ACCESS_DENIED",
    "SIGNATURE_DOES_NOT_MATCH",
    "INVALID_ACCESS_KEY_ID",
    "NO_SUCH_BUCKET",
    "NO_SUCH_KEY",
    "NO_SUCH_UPLOAD",
    "RESOURCE_NOT_FOUND",
    "INVALID_PARAMETER",
    "MISSING_PARAMETER",
    "INVALID_SIGNATURE",
    "UNRECOGNIZED_CLIENT",
    "MISSING_AUTHENTICATION_TOKEN",
    "INCOMPLETE_SIGNATURE",
    "OPT_IN_REQUIRED",
    "VALIDATION",
    "INVALID_CLIENT_TOKEN_ID",
)


def is_transient(error: BaseException) -> bool:
    """Whether an error from the filesystem may succeed when retried (network, 5xx, throttling)."""
    if isinstance(
        error, (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError)
    ):
        return False
    if not isinstance(error, OSError):
        return False
    text = str(error)
    return not any(marker in text for marker in _PERMANENT)


def is_transient_read(error: BaseException) -> bool:
    """Transient errors of a read, plus what a body cut short by the network looks like to the Parquet
    decoder: the S3 client may hand over a truncated ranged GET without an error, and decoding it fails
    (``Couldn't deserialize thrift``, out-of-bounds slices). Files are immutable, so reading again is safe;
    a file that is really corrupt fails the same way every time and the error surfaces after the retries."""
    if isinstance(error, OSError):
        return is_transient(error)
    return isinstance(error, (ValueError, EOFError)) and type(error).__module__.startswith("pyarrow")


def with_retries(
    operation: Callable[[], T],
    *,
    attempts: int,
    what: Callable[[], str],
    on_retry: Callable[[BaseException], None] | None = None,
    retry_if: Callable[[BaseException], bool] = is_transient,
    base_delay: float = 0.2,
    max_delay: float = 5.0,
) -> T:
    """Run ``operation``; on a transient error wait (exponential backoff with jitter) and run it again."""

    def log_retry(e: BaseException, attempt: int, delay: float) -> None:
        # The message names the file, never credentials (they are not part of any path or error text).
        log.warning(
            "%s failed (%s: %s); retry %d/%d in %.2f s",
            what(),
            type(e).__name__,
            str(e).splitlines()[0][:200],
            attempt,
            attempts - 1,
            delay,
        )
        if on_retry is not None:
            on_retry(e)

    def retryable(e: BaseException) -> bool:
        return isinstance(e, (OSError, ValueError, EOFError)) and retry_if(e)

    return RetryPolicy(attempts, base_delay, max_delay).run(operation, retryable, log_retry)
