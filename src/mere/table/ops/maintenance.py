"""Maintenance: expiry of old versions (by hand, or by the ``retention.*`` policy), cleanup of unreferenced
files, and the automatic maintenance that follows a commit of this process (compaction by the
``compaction.*`` policy, then retention), inline or on a background thread. Automatic maintenance never
fails (nor undoes) the write that triggered it."""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from mere.durations import parse_duration
from mere.errors import InvalidInput, NoSuchVersion, StorageError
from mere.io.options import redact_url
from mere.metadata import CommitResult, ExpireResult
from mere.spec import TableSpec
from mere.table.context import TableContext
from mere.table.ops import consumers
from mere.table.ops.compaction import check_flag, policy, runs_due
from mere.table.versions import current, files_at, require_live, tags, to_micros

log = logging.getLogger("mere.table.table")
_BACKGROUND_COMPACTIONS: dict[str, threading.Lock] = {}  # per table: one background compaction at a time
# A forked child has none of the parent's threads: a lock one of them held would stay held for good.
os.register_at_fork(after_in_child=_BACKGROUND_COMPACTIONS.clear)


class Maintained(Protocol):
    """What automatic maintenance asks of a table handle (``mere.Table`` is one)."""

    @property
    def context(self) -> TableContext:
        """The table as operations see it."""

    def auto_compact(self, version: int | None = None) -> CommitResult | None:
        """Compact by the table's policy."""

    def compact(self, *, splits: Any = None, tiered: bool = False) -> CommitResult | None:
        """Fold splits."""


@dataclass
class RetentionState:
    """What a handle learnt about when its next expiry can be due (so that not every commit asks)."""

    next_check: float = 0.0  # time.time() before which no version can be due to expire
    next_version: int = 0  # ... and the version before which too few versions exist


def retention_policy(spec: TableSpec) -> tuple[dt.timedelta | None, int]:
    """``(retention.max-age, retention.min-versions)``: None for an age that never expires."""
    props = spec.properties
    age = props.get("retention.max-age", "off")
    return (None if age.lower() == "off" else parse_duration(age)), int(
        props.get("retention.min-versions", 1)
    )


def after_commit(table: Maintained, state: RetentionState, result: CommitResult) -> None:
    """Automatic maintenance after a commit of this process (see :meth:`mere.Table.auto_compact` and
    :meth:`mere.Table.auto_expire`)."""
    ctx = table.context
    mode = policy(ctx.spec)[0]
    compacts = mode != "off" and result.operation != "compact" and ctx.spec.has_primary_key
    expires = retention_policy(ctx.spec)[0] is not None
    if not (compacts or expires):
        return

    def maintain() -> None:
        if compacts:
            compact_if_due(table, result.version)
        if expires:
            auto_expire(table.context, state, result.version)

    if mode == "background":
        busy = _BACKGROUND_COMPACTIONS.setdefault(ctx.uuid, threading.Lock())
        if not busy.acquire(blocking=False):
            return  # one is running for this table: it or the next commit's catches up

        def run() -> None:
            try:
                maintain()
            finally:
                busy.release()

        threading.Thread(target=run, name=f"mere-auto-compact-{ctx.name}", daemon=True).start()
    else:
        maintain()


def auto_compact(table: Maintained, version: int | None) -> CommitResult | None:
    """Fold the splits the policy finds due (None when none is, or when compaction failed: logged)."""
    ctx = table.context
    require_live(ctx)
    handle = ctx.handle
    if version is not None:
        handle.resolve_version(version)  # a bad or unknown version raises, before anything runs
    return compact_if_due(table, version)


def compact_if_due(table: Maintained, version: int | None) -> CommitResult | None:
    """:func:`auto_compact` without its checks of the arguments: after a commit of this handle, whose
    version exists (one catalog listing when nothing is due)."""
    ctx = table.context
    handle = ctx.handle
    try:
        files = None if version is None else handle.files_at(version)
        due = sorted(runs_due(handle, version, files))
        return table.compact(splits=due, tiered=True) if due else None
    except Exception as e:  # a policy run must never fail the write that triggered it
        logging.getLogger("mere").warning("%s: automatic compaction failed (%s); data unchanged", ctx.name, e)
        return None


def auto_expire(ctx: TableContext, state: RetentionState, committed: int | None) -> list[str]:
    """Expire by the retention policy; ``committed``: the version this handle just committed (None:
    unknown). Returns the deleted paths; empty when nothing is due or expiry failed (logged)."""
    age, keep_newest = retention_policy(ctx.spec)
    if age is None or time.time() < state.next_check:
        return []
    if committed is not None and committed < state.next_version:
        return []  # too few versions yet to give one up
    try:
        newest, oldest = ctx.store.version_range(ctx.table_id)
        if newest - oldest + 1 <= keep_newest:
            state.next_version = oldest + keep_newest
            return []
        second = ctx.store.snapshot(ctx.table_id, oldest + 1).committed_at
        due_at = (second + age + age / 10).timestamp()
        if time.time() < due_at:
            state.next_check = due_at
            return []
        cutoff = dt.datetime.now(dt.UTC) - age
        keep = min(ctx.store.version_as_of(ctx.table_id, to_micros(cutoff)), newest - keep_newest + 1)
        if keep <= oldest:
            return []
        done = expire_versions(ctx, keep)
        if done.oldest < keep:
            # A consumer holds versions back: look again a tenth of the age later (it may move on, or
            # stay unseen long enough to be dropped), not after every commit.
            state.next_check = time.time() + age.total_seconds() / 10
        return done.paths
    except Exception as e:  # a policy run must never fail the write that triggered it
        logging.getLogger("mere").warning("%s: automatic expiry failed (%s); nothing changed", ctx.name, e)
        return []


def expire(ctx: TableContext, older_than: dt.timedelta, dry_run: bool) -> list[str]:
    """See :meth:`mere.Table.expire`."""
    check_age(ctx.name, older_than)
    check_flag(ctx.name, "dry_run", dry_run)
    require_live(ctx)
    try:
        cutoff = dt.datetime.now(dt.UTC) - older_than
    except OverflowError:  # before year 1: no version is that old
        return []
    try:
        keep = ctx.store.version_as_of(ctx.table_id, to_micros(cutoff))
    except NoSuchVersion:
        return []
    return expire_keeping(ctx, keep, dry_run)


def expire_keeping(ctx: TableContext, keep: int, dry_run: bool) -> list[str]:
    """Expire the versions before ``keep`` that no consumer needs (see :meth:`mere.Table.expire`)."""
    if dry_run:
        _require_files_here(ctx, keep)
        newest, oldest = ctx.store.version_range(ctx.table_id)
        keep = max(min(keep, newest), oldest)
        pinned = consumers.pinned_from(ctx, keep)
        return expirable(ctx, keep if pinned is None else min(keep, pinned))
    return expire_versions(ctx, keep).paths


def expire_versions(ctx: TableContext, keep: int) -> ExpireResult:
    """Expire the versions before ``keep`` that no live consumer needs, dropping (with a warning) the
    consumers unseen for longer than ``changes.consumer-expiration`` that hold some back, and delete the
    files no version references any more."""
    _require_files_here(ctx, keep)
    unseen, reason = consumers.unseen_before(ctx)
    done = ctx.store.expire(ctx.table_id, keep, unseen_before=unseen, reason=reason)
    consumers.report_dropped(ctx, done.dropped)
    for (
        p
    ) in done.paths:  # unreferenced now: a failure here leaves garbage for cleanup(), never a broken table
        try:
            ctx.storage.delete(p)
        except Exception:
            log.warning("could not delete expired file %s", p)
    return done


def _require_files_here(ctx: TableContext, keep: int) -> None:
    """Raise if the storage lacks a file the newest version reads, or (where it reads none) one that
    expiring versions before ``keep`` would delete: then it is not this table's warehouse (e.g. a
    mistyped one beside the right catalog), or files were lost, and expiring would mark versions gone
    while deleting nothing."""
    live = files_at(ctx, current(ctx))
    going = [] if live else expirable(ctx, keep)  # (walks the history: only where needed)
    probe = live[0].path if live else (going[0] if going else None)
    if probe is not None and ctx.storage.missing([probe]):
        raise StorageError(
            f"{ctx.name}: {redact_url(ctx.storage.file_uri(probe))}, a file the catalog lists, does not "
            f"exist: is {redact_url(ctx.storage.uri)} the warehouse of this catalog (or was the file "
            "lost)? Nothing was changed"
        )


def expirable(ctx: TableContext, keep_from: int) -> list[str]:
    """The paths ``expire`` would delete keeping versions from ``keep_from`` on, computed from what the
    catalog lists (nothing changes): the rows removed by a version up to the kept one that no tagged
    version needs, less the paths a remaining row (a rollback may re-add a file) still uses."""
    history = ctx.store.history(ctx.table_id)
    oldest = ctx.store.oldest_version(ctx.table_id)
    keep = max(min(keep_from, history[-1].version), oldest)
    kept = files_at(ctx, keep)
    needed = {f.id for f in kept}
    still = {f.path for f in kept}
    for v in set(tags(ctx).values()):
        tagged = files_at(ctx, v)
        needed.update(f.id for f in tagged)
        still.update(f.path for f in tagged)
    gone: set[str] = set()
    for snap in history:
        if 0 < snap.version <= keep and snap.summary.get("removed_files", 1):
            # every row removed by this version was live at the one before (what an earlier expire
            # left of it: rows a tag kept)
            before = ctx.store.files_at(ctx.table_id, snap.version - 1, expired_ok=True)
            gone.update(f.path for f in before if f.id not in needed)
        elif snap.version > keep and snap.operation == "rollback":
            still.update(f.path for f in files_at(ctx, snap.version))
    # Change logs are live at no version: each goes with its commit (the kept version's log stays).
    gone.update(
        f.path
        for f, _ in ctx.store.files_changed(ctx.table_id, oldest - 1, keep)
        if f.content == "log" and (f.added_version or 0) < keep
    )
    return sorted(gone - still)


def cleanup(ctx: TableContext, older_than: dt.timedelta, dry_run: bool) -> list[str]:
    """See :meth:`mere.Table.cleanup`."""
    check_age(ctx.name, older_than)
    check_flag(ctx.name, "dry_run", dry_run)
    require_live(ctx)
    cutoff = time.time() - older_than.total_seconds()
    if not dry_run:
        # First the fence: a commit landing from now on whose files began before the cutoff is refused
        # (they may be deleted below), and one that landed before is among the files referenced.
        ctx.store.fence_cleanup(ctx.table_id, int(cutoff * 1e6))
    referenced = ctx.store.all_file_paths(ctx.table_id)
    listed = ctx.storage.list_files(ctx.location)
    # Again after reading what is referenced: a table dropped meanwhile references nothing any more.
    require_live(ctx)
    removed = []
    for path, _size, mtime in listed:
        # Only files mere wrote: a file someone else put under the table's location is theirs.
        if path not in referenced and mtime < cutoff and ctx.storage.made_by_mere(path):
            if not dry_run:
                ctx.storage.delete(path)
            removed.append(path)
    if dry_run:
        return removed
    return removed + ctx.storage.abort_stale_uploads(ctx.location, cutoff)


def check_age(table: str, value: Any) -> None:
    """``value`` is a non-negative timedelta."""
    if not isinstance(value, dt.timedelta) or value < dt.timedelta(0):
        raise InvalidInput(
            f"{table}: older_than must be a non-negative datetime.timedelta "
            f"(e.g. timedelta(days=7)), got {value!r}"
        )
