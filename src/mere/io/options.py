"""``storage_options``: one flat ``dict[str, str]`` with documented keys, aliases and environment fallbacks.

Keys follow the object_store / delta-rs / lance spelling (``aws_`` prefixes are accepted as aliases), so the
same dictionary works across those tools. A key given in ``storage_options`` wins over its environment
variables; unknown keys are an error (a typo must not silently fall back to defaults). ``docs/storage.md``
has the table; a test checks it lists every key below.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from mere.errors import InvalidInput
from mere.options import parse_bool, parse_bytes


@dataclass(frozen=True)
class Option:
    name: str
    aliases: tuple[str, ...]
    env: tuple[str, ...]
    kind: str  # str | bool | int | seconds | bytes
    default: str | None
    secret: bool
    doc: str


_MIB = 1024 * 1024

OPTIONS: tuple[Option, ...] = (
    Option(
        "endpoint",
        ("aws_endpoint", "aws_endpoint_url", "endpoint_url", "endpoint_override"),
        ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"),
        "str",
        None,
        False,
        "S3-compatible server, e.g. `http://127.0.0.1:8333` (scheme optional; default: AWS)",
    ),
    Option(
        "region",
        ("aws_region", "aws_default_region"),
        ("AWS_REGION", "AWS_DEFAULT_REGION"),
        "str",
        "us-east-1",
        False,
        "bucket region",
    ),
    Option(
        "access_key_id",
        ("aws_access_key_id", "key", "access_key"),
        ("AWS_ACCESS_KEY_ID",),
        "str",
        None,
        True,
        "access key id (with `secret_access_key`; otherwise the AWS default credential chain)",
    ),
    Option(
        "secret_access_key",
        ("aws_secret_access_key", "secret", "secret_key"),
        ("AWS_SECRET_ACCESS_KEY",),
        "str",
        None,
        True,
        "secret access key",
    ),
    Option(
        "session_token",
        ("aws_session_token", "token", "aws_token"),
        ("AWS_SESSION_TOKEN",),
        "str",
        None,
        True,
        "session token of temporary credentials",
    ),
    Option(
        "role_arn",
        ("aws_role_arn",),
        ("AWS_ROLE_ARN",),
        "str",
        None,
        False,
        "assume this IAM role (with `role_session_name`, `external_id`)",
    ),
    Option(
        "role_session_name",
        ("aws_role_session_name",),
        ("AWS_ROLE_SESSION_NAME",),
        "str",
        None,
        False,
        "session name when assuming `role_arn`",
    ),
    Option(
        "external_id", ("aws_external_id",), (), "str", None, True, "external id when assuming `role_arn`"
    ),
    Option(
        "anonymous",
        ("skip_signature", "aws_skip_signature"),
        ("AWS_SKIP_SIGNATURE",),
        "bool",
        "false",
        False,
        "unsigned requests (public buckets)",
    ),
    Option(
        "allow_http",
        ("aws_allow_http",),
        ("AWS_ALLOW_HTTP",),
        "bool",
        "false",
        False,
        "allow plain http (an `http://` endpoint implies it)",
    ),
    Option(
        "virtual_hosted_style_request",
        ("aws_virtual_hosted_style_request",),
        ("AWS_VIRTUAL_HOSTED_STYLE_REQUEST",),
        "bool",
        "false",
        False,
        "`bucket.host` addressing instead of `host/bucket`",
    ),
    Option(
        "ca_file",
        ("aws_ca_bundle", "tls_ca_file_path"),
        ("AWS_CA_BUNDLE",),
        "str",
        None,
        False,
        "CA bundle for TLS",
    ),
    Option(
        "proxy",
        ("proxy_url", "aws_proxy_url"),
        (),
        "str",
        None,
        True,
        "HTTP proxy URL (may carry credentials, so it is treated as a secret)",
    ),
    Option(
        "retries",
        ("max_retries", "aws_max_retries"),
        (),
        "int",
        "5",
        False,
        "retries of a request after a transient error (5xx, throttling, timeouts, connection resets), "
        "with exponential backoff; a file read or upload that still fails is retried once more whole",
    ),
    Option(
        "connect_timeout",
        ("aws_connect_timeout",),
        (),
        "seconds",
        "5",
        False,
        "seconds to establish a connection (`500ms`, `2s` also accepted)",
    ),
    Option(
        "request_timeout",
        ("timeout", "aws_request_timeout"),
        (),
        "seconds",
        "30",
        False,
        "seconds a request may wait for data before it fails (and is retried)",
    ),
    Option(
        "max_connections",
        ("max_concurrency", "pool_max_connections"),
        (),
        "int",
        "64",
        False,
        "concurrent requests to the store (reads and uploads); also the IO thread count",
    ),
    Option(
        "coalesce_bytes",
        ("hole_size_limit",),
        (),
        "bytes",
        str(1 * _MIB),
        False,
        "byte ranges of one file closer than this are fetched in one request",
    ),
    Option(
        "range_bytes",
        ("range_size_limit",),
        (),
        "bytes",
        str(32 * _MIB),
        False,
        "largest coalesced range (bigger reads are split into parallel requests)",
    ),
    Option(
        "read_ahead_bytes",
        ("max_inflight_bytes",),
        (),
        "bytes",
        str(256 * _MIB),
        False,
        "fetched-but-not-yet-merged bytes a scan may hold for read-ahead (backpressure); "
        "each split's current window is always read",
    ),
    Option("allow_bucket_creation", (), (), "bool", "false", False, "create a missing bucket on first write"),
)

BY_NAME = {o.name: o for o in OPTIONS}
_LOOKUP = {k: o for o in OPTIONS for k in (o.name, *o.aliases)}


def canonical(options: Mapping[str, Any] | None, *, strict: bool = True) -> dict[str, str]:
    """Options under their canonical names (aliases resolved, case-insensitive); no environment lookup."""
    out: dict[str, str] = {}
    for key, value in (options or {}).items():
        if not isinstance(key, str):
            raise InvalidInput(f"storage_options keys must be strings, got {type(key).__name__}")
        opt = _LOOKUP.get(key.lower())
        if opt is None:
            if strict:
                raise InvalidInput(
                    f"unknown storage option {key!r}; known keys: {', '.join(o.name for o in OPTIONS)} "
                    "(see docs/storage.md)"
                )
            continue
        if value is None:
            continue
        if opt.name in out and out[opt.name] != str(value):
            raise InvalidInput(f"storage option {opt.name!r} given twice (as {key!r} and an alias)")
        out[opt.name] = str(value)
    return out


def resolve_options(
    options: Mapping[str, Any] | None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Canonical options with the environment as fallback and defaults last."""
    env = os.environ if environ is None else environ
    given = canonical(options)
    out: dict[str, str] = {}
    for opt in OPTIONS:
        if opt.name in given:
            out[opt.name] = given[opt.name]
            continue
        for var in opt.env:
            if env.get(var):
                out[opt.name] = env[var]
                break
        else:
            if opt.default is not None:
                out[opt.name] = opt.default
    return out


def as_bool(name: str, value: str) -> bool:
    """A boolean storage option, as :func:`mere.options.parse_bool` reads every boolean option."""
    return parse_bool(value, f"storage option {name!r}", shown=_show(name, value))


def as_int(name: str, value: str, minimum: int = 0, maximum: int = 2**31 - 1) -> int:
    if not re.fullmatch(r"\s*[+-]?[0-9]+\s*", value):  # ASCII digits only: int() also reads other scripts'
        raise InvalidInput(f"storage option {name!r} must be an integer, got {_show(name, value)}")
    n = int(value.strip())
    if n < minimum:
        raise InvalidInput(f"storage option {name!r} must be at least {minimum}, got {n}")
    if n > maximum:
        raise InvalidInput(f"storage option {name!r} must be at most {maximum}, got {_show(name, value)}")
    return n


def as_seconds(name: str, value: str) -> float:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m)?\s*", value)
    if not m:
        raise InvalidInput(
            f"storage option {name!r} must be seconds (e.g. 5, 2.5s, 500ms), got {_show(name, value)}"
        )
    n = float(m.group(1))
    return n / 1000 if m.group(2) == "ms" else n * 60 if m.group(2) == "m" else n


def as_bytes(name: str, value: str) -> int:
    """A byte size storage option, as :func:`mere.options.parse_bytes` reads every byte size (blank: the
    option's default)."""
    what = f"storage option {name!r}"
    size = parse_bytes(value, what, shown=_show(name, value))
    if size is None:
        known = BY_NAME.get(name)
        if known is None or known.default is None:
            raise InvalidInput(f"{what} must be a byte size, got {_show(name, value)}")
        size = int(known.default)
    return size


# Words that make a storage option's value, or a URL query value, a secret wherever they occur in its key,
# and keys that are secrets only as a whole (``sig``: an Azure SAS token's; "design" or "signal" are not).
SECRET_WORDS = ("secret", "password", "passwd", "token", "key", "credential", "sas", "signature", "proxy")
SECRET_KEYS = ("sig",)


def is_secret(key: str) -> bool:
    """Whether a storage option's (or a URL query parameter's) value is a secret, judged by its key: mere's
    known options say so themselves."""
    opt = _LOOKUP.get(key.lower())
    if opt is not None:
        return opt.secret
    k = key.lower()
    return k in SECRET_KEYS or any(s in k for s in SECRET_WORDS)


def redact(options: Mapping[str, Any]) -> dict[str, str]:
    """Storage options with secret values hidden, for reprs, logs and messages."""
    out = {}
    for k, v in options.items():
        if is_secret(str(k)):
            out[str(k)] = "***"
        else:
            out[str(k)] = redact_url(str(v))
    return out


def redact_url(value: str) -> str:
    """Hide the user info of ``scheme://user:password@host`` URLs and secret query values (an Azure SAS
    token's ``sig``, a ``secret_key=``)."""
    if "://" not in value:
        return value
    try:
        parts = urlsplit(value)
    except ValueError:
        return "***"  # not a URL urlsplit can read: nothing of it is shown
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rpartition("@")[2]
    query = "&".join(
        f"{k}=***" if eq and is_secret(k) else f"{k}{eq}{v}"
        for k, eq, v in (pair.partition("=") for pair in parts.query.split("&"))
    )
    if netloc == parts.netloc and query == parts.query:
        return value
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _show(name: str, value: str) -> str:
    return "***" if is_secret(name) else repr(value)
