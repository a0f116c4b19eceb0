"""Rollback: make an older version current again, as a new commit whose live files are that version's.

A rollback replaces the whole table state, so it follows the strictest conflict rules
(:class:`~mere.table.conflicts.NothingLanded`, :func:`~mere.table.conflicts.not_overtaken`): it is
recomputed only over concurrent compactions, and refuses to undo any other commit it never saw.
"""

from __future__ import annotations

from dataclasses import replace

from mere.errors import CommitConflict, InvalidInput, NoSuchVersion
from mere.metadata import CommitResult
from mere.retry import COMMIT_RETRIES
from mere.spec import TableSpec
from mere.table.commit import ONE_ATTEMPT, Change, Commit, RemoveFiles
from mere.table.conflicts import NothingLanded, Overtaken, lost_race, not_overtaken
from mere.table.context import SchemaChange, TableContext, TableHandle
from mere.table.evolve import same_columns
from mere.table.versions import current, files_at


def rollback(table: TableHandle, target: int, expected_version: int | None = None) -> CommitResult:
    """Roll back to the readable version ``target`` (see :meth:`mere.Table.rollback`)."""
    # a commit other than a compaction after ``expected``: refuse, do not undo it
    expected = table.version if expected_version is None else _seen(table, expected_version)

    def attempt() -> CommitResult:
        ctx = table.context
        base = current(ctx)
        landed = (ctx.store.snapshot(ctx.table_id, v) for v in range(expected + 1, base + 1))
        not_overtaken(ctx.name, landed, target)
        return _commit(ctx, target, base)

    try:
        return COMMIT_RETRIES.run(attempt, lost_race)
    except Overtaken as e:
        raise CommitConflict(str(e)) from None


def _seen(table: TableHandle, version: object) -> int:
    if not isinstance(version, int) or isinstance(version, bool):
        raise InvalidInput(f"{table.name}: expected_version must be an int, got {version!r}")
    newest = table.version
    if not 0 <= version <= newest:
        raise InvalidInput(
            f"{table.name}: expected_version {version} is not a version of the table (0 to {newest})"
        )
    return version


def _commit(ctx: TableContext, target: int, base: int) -> CommitResult:
    """One attempt: swap the live files at ``base`` for those of ``target``, committing only onto ``base``."""
    wanted = files_at(ctx, target)
    live = files_at(ctx, base)
    live_ids = {f.id for f in live}
    wanted_ids = {f.id for f in wanted}
    # Files of the target that are still live stay as they are; the others come back as new rows with
    # their own sequence numbers, so they merge in the order they had (the commit renumbers them).
    add = [f for f in wanted if f.id not in live_ids]
    remove = tuple(f for f in live if f.id not in wanted_ids)
    present = {path for path, _size, _mtime in ctx.storage.list_files(ctx.location)} if add else set()
    missing = [f.path for f in add if f.path not in present]
    if missing:
        raise NoSuchVersion(
            f"{ctx.name}: files of version {target} are gone from storage ({missing[:3]}...): "
            "cannot roll back to it"
        )
    commit = Commit(ctx, retries=ONE_ATTEMPT, read_version=base)
    commit.add(
        Change(
            "rollback",
            add,
            0,
            {"rollback_to": target},
            RemoveFiles(remove, whole_table=True),
            NothingLanded(),
            restores=target,
        )
    )
    text = ctx.store.spec_at(ctx.table_id, target)
    if text is not None:
        then = TableSpec.from_json(text, ctx.name)
        # Against the properties at ``base``, not the handle's: another handle may have changed them since.
        now_text = ctx.store.spec_at(ctx.table_id, base)
        now = ctx.spec if now_text is None else TableSpec.from_json(now_text, ctx.name)
        if dict(then.properties) != dict(now.properties):
            commit.restore_properties(then.properties, now.properties)
        if not same_columns(then, ctx.spec):
            # The version's columns come back too; ids already given stay given.
            restored = replace(
                then,
                properties=ctx.spec.properties,
                last_field_id=max(then.last_field_id, ctx.spec.last_field_id),
                legacy_field_ids=then.legacy_field_ids
                if then.legacy_field_ids is not None
                else ctx.spec.legacy_field_ids,
            )
            commit.schema = SchemaChange(restored, (f"columns of version {target}",))
    return commit.run()
