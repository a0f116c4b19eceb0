"""Change-feed consumers as the catalog keeps them: a name of a table with a position, the last version it
has processed. Its feed starts after the position, and ``expire`` (by hand or by the ``retention.*``
policy) keeps every version from the lowest position of the table's live consumers on, as it keeps tagged
versions.

A consumer unseen (no read, no commit) for longer than the table's ``changes.consumer-expiration``
(default :data:`DEFAULT_EXPIRATION`) stops pinning: the next expire that would give up versions it holds
drops it instead, loudly (a warning in the log, and the time and reason recorded in the catalog, shown by
``Table.inspect.consumers()``); its next use raises :class:`~mere.errors.ConsumerDropped`. One that holds
back nothing is left alone, however long unseen.

The :class:`~mere.table.ops.change_log.Consumer` handle reads and advances one; these functions are what
it, ``Table`` and maintenance share.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from typing import Any

from mere.durations import parse_duration
from mere.errors import InvalidInput, NoSuchTable, NoSuchVersion
from mere.metadata import ConsumerRecord, micros_to_datetime, now_micros
from mere.spec import TableSpec
from mere.table.context import TableContext
from mere.table.versions import gone, require_live

EXPIRATION = "changes.consumer-expiration"
DEFAULT_EXPIRATION = "7d"
"""A week, as Kafka keeps a consumer group's offsets (``offsets.retention.minutes``, raised from a day to
7 days by KIP-186 so that consumers stopped over a weekend or a holiday resume), and as long as tables
created now keep versions (``retention.max-age=7d``): a reader down for less than that loses nothing,
and a dead one holds back storage for a week at most."""
MAX_VERSION = 2**63 - 1  # the largest version a catalog can hold
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]{0,127}")
log = logging.getLogger("mere.table.table")


def check_name(table: str, name: Any) -> str:
    """A consumer name, checked: 1 to 128 ASCII letters, digits, ``.``, ``_`` and ``-``, starting with a
    letter or digit (as tag names).

    Raises:
        InvalidInput: any other value.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidInput(
            f"{table}: a consumer name is 1 to 128 ASCII letters, digits, '.', '_' or '-', starting with a "
            f"letter or digit; got {name!r}"
        )
    return name


def check_version(table: str, what: str, value: Any) -> int:
    """A version argument: a non-negative integer (NoSuchVersion beyond any catalog's integers).

    Raises:
        InvalidInput: not a non-negative integer.
        NoSuchVersion: beyond the largest version a catalog holds.
    """
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidInput(f"{table}: {what} must be a non-negative integer, got {value!r}")
    if value > MAX_VERSION:
        raise NoSuchVersion(f"{table}: no version {value}")
    return value


def expiration(spec: TableSpec) -> dt.timedelta | None:
    """The table's ``changes.consumer-expiration`` (default :data:`DEFAULT_EXPIRATION`); None: ``off``."""
    text = spec.properties.get(EXPIRATION, DEFAULT_EXPIRATION)
    return None if text.strip().lower() == "off" else parse_duration(text)


def unseen_before(ctx: TableContext) -> tuple[int | None, str]:
    """The instant (microseconds) before which a consumer last seen is unseen too long, and the reason a
    drop records; None where consumers never expire."""
    limit = expiration(ctx.spec)
    if limit is None:
        return None, ""
    text = ctx.spec.properties.get(EXPIRATION, DEFAULT_EXPIRATION)
    reason = f"unseen for longer than {EXPIRATION} ({text.strip()})"
    return now_micros() - limit // dt.timedelta(microseconds=1), reason


def register(ctx: TableContext, name: str, start_version: int | None) -> tuple[ConsumerRecord, bool]:
    """The consumer ``name``, registered at ``start_version`` (None: the newest version) when new."""
    check_name(ctx.name, name)
    if start_version is not None:
        check_version(ctx.name, "start_version", start_version)
    try:
        return ctx.store.create_consumer(ctx.table_id, name, start_version)
    except NoSuchTable:
        raise gone(ctx) from None


def get(ctx: TableContext, name: str, *, touch: bool) -> ConsumerRecord:
    """A live consumer (``touch``: marked seen now)."""
    check_name(ctx.name, name)
    try:
        return ctx.store.consumer(ctx.table_id, name, touch=touch)
    except NoSuchTable:
        raise gone(ctx) from None


def claim(ctx: TableContext, name: str, end_version: int | None) -> tuple[int, int]:
    """The range ``(start, end]`` consumer ``name`` reads next (the pending one again, if any), recorded
    as pending and the consumer marked seen; ``end_version`` None: the newest version."""
    check_name(ctx.name, name)
    if end_version is not None:
        check_version(ctx.name, "end_version", end_version)
    try:
        return ctx.store.claim_consumer(ctx.table_id, name, end_version)
    except NoSuchTable:
        raise gone(ctx) from None


def advance(ctx: TableContext, name: str, version: Any, *, seek: bool) -> ConsumerRecord:
    """Move a consumer forward to ``version`` (``seek``: to it, forward or back)."""
    check_name(ctx.name, name)
    check_version(ctx.name, "version", version)
    try:
        return ctx.store.advance_consumer(ctx.table_id, name, version, seek=seek)
    except NoSuchTable:
        raise gone(ctx) from None


def drop(ctx: TableContext, name: str) -> ConsumerRecord:
    """Remove a consumer, live or dropped by expire."""
    check_name(ctx.name, name)
    try:
        return ctx.store.drop_consumer(ctx.table_id, name)
    except NoSuchTable:
        raise gone(ctx) from None


def listed(ctx: TableContext) -> list[ConsumerRecord]:
    """The table's consumers, dropped ones included, by name."""
    require_live(ctx)
    return ctx.store.list_consumers(ctx.table_id)


def pinned_from(ctx: TableContext, keep: int) -> int | None:
    """The oldest version an expire keeping versions from ``keep`` on must keep for the consumers (None:
    no consumer holds one back): the lowest position of the live consumers it would not drop."""
    before, _ = unseen_before(ctx)
    positions = [
        c.position
        for c in listed(ctx)
        if not c.dropped
        and not (before is not None and c.last_seen < micros_to_datetime(before) and c.position < keep)
    ]
    return min(positions, default=None)


def report_dropped(ctx: TableContext, dropped: list[ConsumerRecord]) -> None:
    """A warning for each consumer expire dropped (loudly: its reader loses its place)."""
    for c in dropped:
        log.warning(
            "%s: expire dropped change-feed consumer %r (%s); its next use raises ConsumerDropped",
            ctx.name,
            c.name,
            c.dropped_reason,
        )
