"""Which versions of a table a read may see: resolving ``version`` / ``as_of`` / ``tag``, checking a
version is readable (not expired, or tagged), and the layout a version was written with."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from mere.errors import InvalidInput, NoSuchTable, NoSuchTag, NoSuchVersion
from mere.metadata import FileEntry
from mere.options import as_of_micros as to_micros  # naive: UTC
from mere.spec import TableSpec
from mere.table.context import TableContext
from mere.table.evolve import same_columns

_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]{0,127}")


def current(ctx: TableContext) -> int:
    """The newest committed version."""
    try:
        return ctx.store.current_version(ctx.table_id)
    except NoSuchTable:
        raise gone(ctx) from None


def gone(ctx: TableContext) -> NoSuchTable:
    """The error of a handle whose table was dropped."""
    return NoSuchTable(f"table {ctx.name} no longer exists (dropped since this handle was loaded)")


def require_live(ctx: TableContext) -> None:
    """NoSuchTable when the handle's table was dropped (or dropped and created again) since it was loaded:
    maintenance must not take the catalog's silence about an unknown table for "nothing referenced"."""
    try:
        record = ctx.store.load_table(ctx.record.namespace, ctx.record.name)
    except NoSuchTable:
        record = None
    if record is None or record.uuid != ctx.uuid:
        raise gone(ctx)


def files_at(ctx: TableContext, version: int) -> list[FileEntry]:
    """The live files at a version (NoSuchVersion once it has expired, or before it exists)."""
    if not isinstance(version, int) or isinstance(version, bool):
        raise InvalidInput(f"{ctx.name}: a version is an integer, got {version!r}")
    if not 0 <= version < 2**63:  # beyond any catalog's integers
        raise NoSuchVersion(f"{ctx.name}: no version {version}")
    try:
        return ctx.store.files_at(ctx.table_id, version)
    except NoSuchVersion as e:
        raise NoSuchVersion(f"{ctx.name}: {e}") from None
    except NoSuchTable:
        raise gone(ctx) from None


def resolve(ctx: TableContext, version: int | None = None, as_of: Any = None, tag: str | None = None) -> int:
    """The version a read of ``version``, ``as_of`` or ``tag`` sees (default: the newest); an ``as_of``
    without a zone is read as UTC, not as local time (see :meth:`mere.Table.resolve_version`)."""
    given = [k for k, v in (("version", version), ("as_of", as_of), ("tag", tag)) if v is not None]
    if len(given) > 1:
        raise InvalidInput(f"{ctx.name}: give one of version, as_of and tag, not {' and '.join(given)}")
    if tag is not None:
        return tag_version(ctx, tag)
    if version is None and as_of is None:
        return current(ctx)
    newest, oldest = ctx.store.version_range(ctx.table_id)
    if version is not None:
        return within(ctx, version, newest, oldest)
    try:
        v = ctx.store.version_as_of(ctx.table_id, to_micros(as_of))
    except NoSuchVersion as e:
        raise NoSuchVersion(f"{ctx.name}: {e}") from None
    if v < oldest and not ctx.store.is_tagged(ctx.table_id, v):
        raise NoSuchVersion(f"{ctx.name}: version {v} (as of {as_of}) has expired; the oldest is {oldest}")
    return v


def within(ctx: TableContext, version: int | None, newest: int, oldest: int) -> int:
    """``version`` (None: ``newest``) checked against the table's readable versions."""
    if version is None:
        return newest
    if isinstance(version, bool) or not isinstance(version, int):
        raise InvalidInput(f"{ctx.name}: version must be an integer, got {version!r}")
    if 0 <= version < oldest and not ctx.store.is_tagged(ctx.table_id, version):
        tagged = sorted({v for v in tags(ctx).values() if v < oldest})
        also = f" and the tagged {', '.join(map(str, tagged))}" if tagged else ""
        raise NoSuchVersion(
            f"{ctx.name}: version {version} has expired; the readable versions are {oldest}..{newest}{also}"
        )
    if version < 0 or version > newest:
        raise NoSuchVersion(f"{ctx.name} has versions {oldest}..{newest}; got {version}")
    return version


def spec_at(ctx: TableContext, version: int) -> TableSpec:
    """The layout as of ``version``: ``ctx.spec`` when the catalog cannot tell, and its columns with the
    version's properties when the columns match."""
    if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version <= current(ctx):
        raise NoSuchVersion(f"{ctx.name}: no version {version!r} (the newest is {current(ctx)})")
    text = ctx.store.spec_at(ctx.table_id, version)
    if text is None:
        return ctx.spec
    at = TableSpec.from_json(text, ctx.name)
    if not same_columns(at, ctx.spec):
        return at
    return ctx.spec if at.properties == ctx.spec.properties else replace(ctx.spec, properties=at.properties)


def tags(ctx: TableContext) -> dict[str, int]:
    """The table's tags: name -> version, sorted by name."""
    require_live(ctx)
    return ctx.store.list_tags(ctx.table_id)


def check_tag(table: str, name: Any) -> str:
    """A tag name, checked."""
    if not isinstance(name, str) or not _TAG.fullmatch(name):
        raise InvalidInput(
            f"{table}: a tag name is 1 to 128 ASCII letters, digits, '.', '_' or '-', starting with a letter "
            f"or digit; got {name!r}"
        )
    return name


def tag_version(ctx: TableContext, name: Any) -> int:
    """The version a tag names (NoSuchTag for an unknown one)."""
    check_tag(ctx.name, name)
    try:
        return ctx.store.tag_version(ctx.table_id, name)
    except NoSuchTag:
        raise NoSuchTag(f"{ctx.name} has no tag {name!r}; it has {sorted(tags(ctx))}") from None
