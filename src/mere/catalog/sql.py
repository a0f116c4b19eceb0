"""SQL catalog over SQLAlchemy Core: SQLite embedded by default, PostgreSQL when shared.

Commit protocol: data files are written first; a commit then runs one transaction that locks the
table row (``BEGIN IMMEDIATE`` on SQLite, ``SELECT ... FOR UPDATE`` on PostgreSQL), lets the caller
validate the commits that landed since it read, inserts the new files and the commit row, and bumps
the table version with a compare-and-swap. Nothing is visible until that transaction commits.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import os
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar, cast

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from mere.errors import (
    CatalogError,
    CommitConflict,
    CommitFailed,
    CommitStateUnknown,
    ConsumerDropped,
    InvalidInput,
    NoSuchConsumer,
    NoSuchTable,
    NoSuchTag,
    NoSuchVersion,
    NotInstalled,
    OutlivedCleanup,
    TableExists,
    TagExists,
)
from mere.metadata import (
    CLOCK_MARGIN_MICROS,
    SEQ_SHIFT,
    CommitRequest,
    CommitResult,
    ConcurrentChanges,
    ConsumerRecord,
    ExpireResult,
    FileEntry,
    NewTable,
    Snapshot,
    TableRecord,
    VersionRangeChanges,
    micros_to_datetime,
    now_micros,
)
from mere.retry import CATALOG_LOCK_RETRIES, CATALOG_RECONNECT

log = logging.getLogger(__name__)

# How long a commit whose connection died waits for the locks its transaction held before it calls its
# outcome unknown (the server may still be landing it; PostgreSQL ends a dead client's transaction at once).
LANDED_LOOKUP_WAIT_S = 60

CATALOG_FORMAT = 6
"""Version of the catalog's own tables. Older catalogs are migrated on connect; newer ones are refused.

1: namespaces, tables, commits, files (the first mere). 2: ``mere_tables.oldest_version`` (expiry).
3: the ``mere_catalog`` table holding this number, and ``mere_commits.spec`` (layout changes as commits).
4: ``mere_tags`` (named versions, kept by expire). 5: ``mere_consumers`` (change-feed consumers, whose
positions expire keeps). 6: ``mere_transactions`` (the idempotency keys of catalog transactions).
"""

_metadata = sa.MetaData()

catalog_info = sa.Table(
    "mere_catalog",
    _metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

namespaces = sa.Table(
    "mere_namespaces",
    _metadata,
    sa.Column("name", sa.String(255), primary_key=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
)

tables = sa.Table(
    "mere_tables",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("namespace", sa.String(255), nullable=False),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("uuid", sa.String(32), nullable=False),
    sa.Column("location", sa.Text, nullable=False),
    sa.Column("spec", sa.Text, nullable=False),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("oldest_version", sa.BigInteger, nullable=False, server_default="0"),  # older ones were expired
    sa.Column("created_at", sa.BigInteger, nullable=False),
    sa.UniqueConstraint("namespace", "name", name="mere_tables_name"),
    sqlite_autoincrement=True,  # never reuse the id of a dropped table
)

commits = sa.Table(
    "mere_commits",
    _metadata,
    sa.Column("table_id", sa.Integer, primary_key=True),
    sa.Column("version", sa.BigInteger, primary_key=True),
    sa.Column("committed_at", sa.BigInteger, nullable=False),  # microseconds since the epoch, UTC
    sa.Column("operation", sa.String(32), nullable=False),
    sa.Column("token", sa.String(32), nullable=False, unique=True),
    sa.Column("idempotency_key", sa.String(255), nullable=True),
    sa.Column("summary", sa.Text, nullable=False),
    sa.Column(
        "spec", sa.Text, nullable=True
    ),  # the table's spec from this version on, when the commit changed it
    sa.UniqueConstraint("table_id", "idempotency_key", name="mere_commits_idempotency"),
)

files = sa.Table(
    "mere_files",
    _metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("table_id", sa.Integer, nullable=False),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("partition", sa.Text, nullable=False),
    sa.Column("bucket", sa.Integer, nullable=False),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("added_version", sa.BigInteger, nullable=False),
    sa.Column("removed_version", sa.BigInteger, nullable=True),
    sa.Column("row_count", sa.BigInteger, nullable=False),
    sa.Column("size_bytes", sa.BigInteger, nullable=False),
    sa.Column("content", sa.String(16), nullable=False),
    sa.Column("columns", sa.Text, nullable=True),
    sa.Index("mere_files_added", "table_id", "added_version"),
    sa.Index("mere_files_removed", "table_id", "removed_version"),
)

tags = sa.Table(
    "mere_tags",
    _metadata,
    sa.Column("table_id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(255), primary_key=True),
    sa.Column("version", sa.BigInteger, nullable=False),  # expire keeps this version's files
    sa.Column("created_at", sa.BigInteger, nullable=False),  # microseconds since the epoch, UTC
)

consumers = sa.Table(
    "mere_consumers",
    _metadata,
    sa.Column("table_id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(255), primary_key=True),
    sa.Column("version", sa.BigInteger, nullable=False),  # its position: expire keeps this version and later
    sa.Column("created_at", sa.BigInteger, nullable=False),  # microseconds since the epoch, UTC
    sa.Column("last_seen", sa.BigInteger, nullable=False),  # its last read or commit (the same)
    sa.Column("pending", sa.BigInteger, nullable=True),  # the end of a range read and not committed yet
    sa.Column("dropped_at", sa.BigInteger, nullable=True),  # set when expire dropped it for being unseen
    sa.Column("dropped_reason", sa.Text, nullable=True),
)

transactions = sa.Table(
    "mere_transactions",
    _metadata,
    sa.Column("key", sa.String(255), primary_key=True),  # a catalog transaction's idempotency key
    sa.Column("committed_at", sa.BigInteger, nullable=False),  # microseconds since the epoch, UTC
    sa.Column("tables", sa.Text, nullable=False),  # JSON {"ns.name": [table id, version or null]}
)

# Statements every read or change feed runs, built once: building them costs more than running them on
# SQLite.
# Two branches, each led by the index on (table_id, removed_version): the files live now, and those removed
# after the version. One OR over both made the database walk every file the table ever had (the index on
# added_version), so listing the current version slowed down with the length of the history. The added
# version is compared as an expression (``+ 0``) so that no planner picks its index instead.
_live_files = sa.select(files).where(
    files.c.table_id == sa.bindparam("table_id"),
    files.c.removed_version.is_(None),
    files.c.added_version + 0 <= sa.bindparam("version"),
)
_removed_later = sa.select(files).where(
    files.c.table_id == sa.bindparam("table_id"),
    files.c.removed_version > sa.bindparam("version"),
    files.c.added_version + 0 <= sa.bindparam("version"),
)
_FILES_AT = sa.union_all(_live_files, _removed_later).order_by("seq", "id")
# The tables a commit lands on, with the time of their newest commit (a commit's time is never older).
_HEADS = (
    sa.select(tables.c.id, tables.c.version, commits.c.committed_at)
    .select_from(
        tables.outerjoin(
            commits, sa.and_(commits.c.table_id == tables.c.id, commits.c.version == tables.c.version)
        )
    )
    .where(tables.c.id.in_(sa.bindparam("ids", expanding=True)))
    .order_by(tables.c.id)
)
_HEADS_LOCKED = _HEADS.with_for_update(of=tables)  # PostgreSQL: row locks, taken in id order
_VERSION_RANGE = sa.select(tables.c.version, tables.c.oldest_version).where(
    tables.c.id == sa.bindparam("table_id")
)
_COMMITS_BETWEEN = (
    sa.select(commits)
    .where(
        commits.c.table_id == sa.bindparam("table_id"),
        commits.c.version > sa.bindparam("after"),
        commits.c.version <= sa.bindparam("upto"),
    )
    .order_by(commits.c.version)
)
_FILES_CHANGED = (
    sa.select(files)
    .where(
        files.c.table_id == sa.bindparam("table_id"),
        sa.or_(
            sa.and_(
                files.c.added_version > sa.bindparam("after"), files.c.added_version <= sa.bindparam("upto")
            ),
            sa.and_(
                files.c.removed_version > sa.bindparam("after"),
                files.c.removed_version <= sa.bindparam("upto"),
            ),
        ),
    )
    .order_by(files.c.seq, files.c.id)
)


def _stored_format(conn: Connection) -> int | None:
    """The catalog format of a database: None when it holds no mere catalog yet."""
    inspector = sa.inspect(conn)
    if inspector.has_table(catalog_info.name):
        value = conn.execute(sa.select(catalog_info.c.value).where(catalog_info.c.key == "format")).scalar()
        if value is None:
            raise CatalogError("the catalog's mere_catalog table has no format row: it was not made by mere")
        return int(value)
    if not inspector.has_table(tables.name):
        return None
    return 2 if "oldest_version" in {c["name"] for c in inspector.get_columns(tables.name)} else 1


def _to_format_2(conn: Connection) -> None:
    conn.execute(sa.text("ALTER TABLE mere_tables ADD COLUMN oldest_version BIGINT NOT NULL DEFAULT 0"))


def _to_format_3(conn: Connection) -> None:
    catalog_info.create(conn, checkfirst=True)
    conn.execute(sa.text("ALTER TABLE mere_commits ADD COLUMN spec TEXT"))
    conn.execute(catalog_info.insert().values(key="format", value="3"))


def _to_format_4(conn: Connection) -> None:
    tags.create(conn, checkfirst=True)


def _to_format_5(conn: Connection) -> None:
    consumers.create(conn, checkfirst=True)


def _to_format_6(conn: Connection) -> None:
    transactions.create(conn, checkfirst=True)


MIGRATIONS: tuple[tuple[int, str, Callable[[Connection], None]], ...] = (
    (2, "add mere_tables.oldest_version (versions given up by expire)", _to_format_2),
    (3, "add the mere_catalog format row and mere_commits.spec (layout changes as commits)", _to_format_3),
    (4, "add mere_tags (named versions that expire keeps)", _to_format_4),
    (5, "add mere_consumers (change-feed consumers whose positions expire keeps)", _to_format_5),
    (6, "add mere_transactions (idempotency keys of catalog transactions)", _to_format_6),
)
"""Ordered migrations: (format reached, what it does, the step). Each runs in the upgrade's transaction."""

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def _wraps_database_errors(what: str) -> Callable[[F], F]:
    """Database errors of a catalog method surface as CatalogError (the cause chained), never raw."""

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapped(self: SqlCatalog, *args: Any, **kwargs: Any) -> Any:
            try:
                return fn(self, *args, **kwargs)
            except sa.exc.SQLAlchemyError as e:
                raise CatalogError(f"catalog {self._safe_url()}: cannot {what}: {_first_line(e)}") from e

        return cast(F, wrapped)

    return decorate


_PURGE_PREFIX = "purge:"  # catalog_info keys of dropped tables whose files are still to be deleted


def _fence_key(table_id: int) -> str:
    """The catalog row holding a table's cleanup fence."""
    return f"cleanup_fence:{table_id}"


def _transient(e: BaseException) -> bool:
    return isinstance(e, DBAPIError) and not isinstance(e, IntegrityError) and _is_transient(e)


def _is_transient(e: DBAPIError) -> bool:
    code = getattr(getattr(e, "orig", None), "sqlstate", None)
    if code in ("40001", "40P01", "55P03"):
        return True
    text = str(e).lower()
    return "database is locked" in text or "database is busy" in text or "could not serialize" in text


class SqlCatalog:
    """Catalog state in a SQL database reached by a SQLAlchemy URL."""

    def __init__(self, url: str, *, max_retries: int = 60) -> None:
        if url.startswith("postgresql://") or url.startswith("postgres://"):
            url = "postgresql+psycopg://" + url.split("://", 1)[1]
        self.url = url
        self.max_retries = max_retries
        self._pid = -1
        self._engine: Engine | None = None
        self._ready = False
        self._names: dict[int, str] = {}  # table id -> name, for errors (see _label)
        try:
            parsed = sa.engine.make_url(url)
        except (sa.exc.ArgumentError, ValueError):  # ValueError: a port that is not a number
            shown = re.sub(r"(://[^/@]*?:)[^/@]*@", r"\1***@", url)  # never echo a password
            raise InvalidInput(
                f"catalog {shown!r} is not a database URL: use sqlite:///path or postgresql://user@host/db"
            ) from None
        host = parsed.host or ""
        if "@" in host:
            # SQLAlchemy ends a password at its first "@": the rest of it would be taken for the host.
            raise InvalidInput(
                f"catalog {parsed.drivername}://***@{host.rpartition('@')[2]}...: its password "
                "holds an '@'; write it as %40"
            )
        if parsed.get_backend_name() not in ("sqlite", "postgresql"):
            raise InvalidInput(
                f"catalog {self._safe_url()!r}: mere's catalog runs on SQLite (sqlite:///path) or "
                "PostgreSQL (postgresql://user@host/db)"
            )
        if parsed.get_backend_name() == "postgresql":
            if parsed.get_driver_name() != "psycopg":
                raise InvalidInput(
                    f"catalog {self._safe_url()!r}: mere's PostgreSQL catalog connects through psycopg "
                    "(postgresql://... or postgresql+psycopg://...), not "
                    f"{parsed.get_driver_name()!r}"
                )
            try:
                import psycopg  # noqa: F401
            except ImportError as e:
                raise NotInstalled("a PostgreSQL catalog needs psycopg: pip install 'mere[postgres]'") from e
        if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
            raise InvalidInput(
                f"catalog {url!r}: an in-memory SQLite catalog would vanish with its "
                "connections (and the table files with it); use a file: sqlite:///path/catalog.db"
            )
        # A file database is created by the first write, never by opening or reading it.
        self._sqlite_file = (
            parsed.database
            if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:")
            else None
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (SqlCatalog, (self.url,), {"max_retries": self.max_retries})

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.max_retries = state["max_retries"]

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def engine(self) -> Engine:
        if self._engine is None or self._pid != os.getpid():
            # A forked child must not reuse the parent's connections.
            if self._engine is not None:
                self._engine.dispose(close=False)
            self._engine = self._make_engine()
            self._pid = os.getpid()
        return self._engine

    def _make_engine(self) -> Engine:
        if self.url.startswith("sqlite"):
            engine = sa.create_engine(
                self.url,
                connect_args={"timeout": 60, "check_same_thread": False},
                pool_size=4,
                max_overflow=16,
            )

            @event.listens_for(engine, "connect")
            def _connect(dbapi_conn: Any, _record: Any) -> None:
                dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA busy_timeout=60000")
                # WAL (readers never block the writer) is a lasting mode of the file: set on a new database
                # or mere's own, never on another program's database that a read merely looked into.
                if cur.execute("PRAGMA journal_mode").fetchone()[0] != "wal" and (
                    cur.execute("PRAGMA page_count").fetchone()[0] == 0
                    or cur.execute(
                        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'catalog_info'"
                    ).fetchone()
                ):
                    cur.execute("PRAGMA journal_mode=WAL")
                cur.close()

            @event.listens_for(engine, "begin")
            def _begin(conn: Connection) -> None:
                # Writers take the lock up front so they queue instead of deadlocking; readers never block.
                write = conn.get_execution_options().get("mere_write", False)
                conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

            return engine
        engine = sa.create_engine(self.url, pool_pre_ping=True, pool_size=2, max_overflow=8)
        reached = False

        @event.listens_for(engine, "do_connect")
        def _reconnect(dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
            # Once the server has answered, a refused connection is a restart or failover under way (a
            # second or two): wait it out, as nothing was sent yet. The first connection fails at once,
            # so a wrong address is reported without delay.
            nonlocal reached
            dbapi = dialect.loaded_dbapi

            def connect() -> Any:
                return dbapi.connect(*cargs, **cparams)

            conn = CATALOG_RECONNECT.run(connect, lambda e: reached and isinstance(e, dbapi.OperationalError))
            reached = True
            return conn

        return engine

    def _ensure_schema(self, create: bool) -> bool:
        """Whether the catalog's tables exist; with ``create``, make them (and a SQLite file) if not.

        An existing catalog of an older format is migrated first; a newer one is refused.
        """
        if self._ready:
            return True
        if self._sqlite_file is not None and not self._sqlite_file_has_data():
            if not create:
                return False
            os.makedirs(os.path.dirname(os.path.abspath(self._sqlite_file)), exist_ok=True)

        def read_format() -> int | None:
            with self.engine.connect() as conn:
                return _stored_format(conn)

        try:  # a catalog being created by another process may be locked for a moment
            stored = replace(CATALOG_LOCK_RETRIES, attempts=self.max_retries + 1).run(read_format, _transient)
        except sa.exc.SQLAlchemyError as e:
            raise CatalogError(f"cannot open catalog {self._safe_url()}: {_first_line(e)}") from e
        if stored is None and not create:
            return False
        if stored is not None and stored > CATALOG_FORMAT:
            raise CatalogError(
                f"catalog {self._safe_url()} has format {stored}, newer than this mere "
                f"({mere_version()}, format {CATALOG_FORMAT}): upgrade mere to use it"
            )
        if stored != CATALOG_FORMAT:
            self.upgrade()
        self._ready = True
        return True

    def _sqlite_file_has_data(self) -> bool:
        """Whether the SQLite file exists and is not empty: an empty file holds no catalog, and opening it
        (even to read) would write a database header into it."""
        assert self._sqlite_file is not None
        try:
            return os.path.getsize(self._sqlite_file) > 0
        except OSError:
            return False

    def format_version(self) -> int | None:
        """The catalog's format as stored (None for a database holding no mere catalog)."""
        try:
            if self._sqlite_file is not None and not self._sqlite_file_has_data():
                return None
            with self.engine.connect() as conn:
                return _stored_format(conn)
        except sa.exc.SQLAlchemyError as e:
            raise CatalogError(f"cannot open catalog {self._safe_url()}: {_first_line(e)}") from e

    def upgrade(self) -> list[str]:
        """Create the catalog's tables, or migrate older ones to :data:`CATALOG_FORMAT`; returns the steps run.

        One transaction under the catalog's write lock: concurrent upgrades queue, and a failed one changes
        nothing.
        """
        if self._sqlite_file is not None:
            os.makedirs(os.path.dirname(os.path.abspath(self._sqlite_file)), exist_ok=True)

        def run(conn: Connection) -> list[str]:
            if self.dialect == "postgresql":
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(727265)"))
            stored = _stored_format(conn)
            if stored is None:
                _metadata.create_all(conn, checkfirst=True)
                conn.execute(catalog_info.insert().values(key="format", value=str(CATALOG_FORMAT)))
                return [f"create the catalog tables (format {CATALOG_FORMAT})"]
            if stored > CATALOG_FORMAT:
                raise CatalogError(
                    f"catalog {self._safe_url()} has format {stored}, newer than this mere's "
                    f"{CATALOG_FORMAT}: upgrade mere to use it"
                )
            done = []
            for reached, what, step in MIGRATIONS:
                if stored < reached:
                    step(conn)
                    done.append(f"format {reached}: {what}")
            if done:
                conn.execute(
                    catalog_info.update()
                    .where(catalog_info.c.key == "format")
                    .values(value=str(CATALOG_FORMAT))
                )
                log.info(
                    "catalog %s upgraded to format %d: %s", self._safe_url(), CATALOG_FORMAT, "; ".join(done)
                )
            return done

        try:
            out: list[str] = self._run(run)
        except sa.exc.SQLAlchemyError as e:
            raise CatalogError(f"cannot upgrade catalog {self._safe_url()}: {_first_line(e)}") from e
        self._ready = True
        return out

    def _safe_url(self) -> str:
        return sa.engine.make_url(self.url).render_as_string(hide_password=True)

    def __repr__(self) -> str:
        return f"SqlCatalog({self._safe_url()!r})"

    def _run(self, fn: Callable[[Connection], T]) -> T:
        """Run fn in a write transaction, retrying transient lock and serialisation failures."""

        def once() -> T:
            with self.engine.connect() as conn, conn.execution_options(mere_write=True).begin():
                return fn(conn)

        policy = replace(CATALOG_LOCK_RETRIES, attempts=self.max_retries + 1)
        return policy.run(once, _transient)

    # -- namespaces and tables -------------------------------------------------------------------

    @_wraps_database_errors("create a namespace")
    def create_namespace(self, name: str, exist_ok: bool = True) -> None:
        self._ensure_schema(create=True)

        def run(conn: Connection) -> None:
            exists = conn.execute(sa.select(namespaces.c.name).where(namespaces.c.name == name)).first()
            if exists is None:
                conn.execute(namespaces.insert().values(name=name, created_at=now_micros()))
            elif not exist_ok:
                raise CatalogError(f"namespace {name!r} already exists")

        try:
            self._run(run)
        except IntegrityError:
            if not exist_ok:
                raise CatalogError(f"namespace {name!r} already exists") from None

    @_wraps_database_errors("list namespaces")
    def list_namespaces(self) -> list[str]:
        if not self._ensure_schema(create=False):
            return []
        with self.engine.connect() as conn:
            return [r[0] for r in conn.execute(sa.select(namespaces.c.name).order_by(namespaces.c.name))]

    @_wraps_database_errors("create a table")
    def create_table(
        self, namespace: str, name: str, location: str, spec: str, table_uuid: str
    ) -> TableRecord:
        self.create_namespace(namespace)

        def run(conn: Connection) -> TableRecord:
            # Version 0 carries the spec of every version until a commit changes it (rollback reads it).
            table_id = self._create(conn, NewTable(namespace, name, location, spec, table_uuid))
            return TableRecord(table_id, namespace, name, table_uuid, location, spec, 0)

        try:
            return self._named(self._run(run))
        except IntegrityError as e:
            raise TableExists(f"table {namespace}.{name} already exists") from e

    @_wraps_database_errors("load a table")
    def load_table(self, namespace: str, name: str) -> TableRecord:
        if not self._ensure_schema(create=False):
            raise NoSuchTable(
                f"table {namespace}.{name} does not exist (the catalog {self._safe_url()} is empty)"
            )
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(tables).where(tables.c.namespace == namespace, tables.c.name == name)
            ).first()
            if row is None:
                known = conn.execute(
                    sa.select(namespaces.c.name).where(namespaces.c.name == namespace)
                ).first()
                if known is None:
                    raise NoSuchTable(f"table {namespace}.{name} does not exist (no namespace {namespace!r})")
                raise NoSuchTable(f"table {namespace}.{name} does not exist")
        return self._named(
            TableRecord(row.id, row.namespace, row.name, row.uuid, row.location, row.spec, int(row.version))
        )

    def _named(self, record: TableRecord) -> TableRecord:
        self._names[record.id] = f"{record.namespace}.{record.name}"
        return record

    def _label(self, table_id: int) -> str:
        """How errors name a table: by its name where this catalog loaded it (the usual case)."""
        name = self._names.get(table_id)
        return f"table {name}" if name is not None else f"table id {table_id}"

    @_wraps_database_errors("list tables")
    def list_tables(self, namespace: str | None = None) -> list[str]:
        q = sa.select(tables.c.namespace, tables.c.name).order_by(tables.c.namespace, tables.c.name)
        if namespace is not None:
            q = q.where(tables.c.namespace == namespace)
        if not self._ensure_schema(create=False):
            return []
        with self.engine.connect() as conn:
            return [f"{r[0]}.{r[1]}" for r in conn.execute(q)]

    @_wraps_database_errors("drop a table")
    def drop_table(
        self, namespace: str, name: str, expect: tuple[str, int] | None = None, purge: bool = False
    ) -> TableRecord | None:
        """Remove a table's records. ``expect``: only if the table is still (uuid, version), in the same
        transaction (else None and nothing changes). ``purge``: note, in the same transaction, that its
        files are to be deleted (:meth:`pending_purges`, until :meth:`purged`): a purge that fails or is
        killed can be run again."""
        if not self._ensure_schema(create=False):
            raise NoSuchTable(f"table {namespace}.{name} does not exist")

        def run(conn: Connection) -> TableRecord | None:
            query = sa.select(tables).where(tables.c.namespace == namespace, tables.c.name == name)
            if expect is not None:  # a commit landing between this check and the delete waits, then fails
                query = query.with_for_update()
            row = conn.execute(query).first()
            if row is None:
                raise NoSuchTable(f"table {namespace}.{name} does not exist")
            if expect is not None and (row.uuid, int(row.version)) != expect:
                return None
            conn.execute(files.delete().where(files.c.table_id == row.id))
            conn.execute(tags.delete().where(tags.c.table_id == row.id))
            conn.execute(consumers.delete().where(consumers.c.table_id == row.id))
            conn.execute(commits.delete().where(commits.c.table_id == row.id))
            conn.execute(tables.delete().where(tables.c.id == row.id))
            if purge:
                note = json.dumps({"namespace": row.namespace, "name": row.name, "location": row.location})
                conn.execute(catalog_info.insert().values(key=_PURGE_PREFIX + row.uuid, value=note))
            return TableRecord(
                row.id, row.namespace, row.name, row.uuid, row.location, row.spec, int(row.version)
            )

        return self._run(run)

    @_wraps_database_errors("read pending purges")
    def pending_purges(self, namespace: str, name: str) -> list[tuple[str, str]]:
        """(uuid, location) of the dropped tables of this name whose purge has not finished."""
        if not self._ensure_schema(create=False):
            return []
        with self.engine.connect() as conn:
            notes = conn.execute(
                sa.select(catalog_info.c.key, catalog_info.c.value).where(
                    catalog_info.c.key.startswith(_PURGE_PREFIX)
                )
            ).all()
        out = []
        for key, value in notes:
            note = json.loads(value)
            if (note.get("namespace"), note.get("name")) == (namespace, name):
                out.append((str(key)[len(_PURGE_PREFIX) :], str(note["location"])))
        return out

    @_wraps_database_errors("note a finished purge")
    def purged(self, uuid: str) -> None:
        """The purge of the dropped table ``uuid`` finished."""

        def run(conn: Connection) -> None:
            conn.execute(catalog_info.delete().where(catalog_info.c.key == _PURGE_PREFIX + uuid))

        self._run(run)

    # -- reads -----------------------------------------------------------------------------------

    @_wraps_database_errors("read a table's version")
    def _table_number(self, table_id: int, column: sa.Column[Any]) -> int:
        with self.engine.connect() as conn:
            v = conn.execute(sa.select(column).where(tables.c.id == table_id)).scalar()
        if v is None:
            raise NoSuchTable(f"{self._label(table_id)} no longer exists")
        return int(v)

    def current_version(self, table_id: int) -> int:
        return self._table_number(table_id, tables.c.version)

    @_wraps_database_errors("read a table's versions")
    def version_range(self, table_id: int) -> tuple[int, int]:
        """(the newest version, the oldest readable one) in one query."""
        with self.engine.connect() as conn:
            return self._version_range(conn, table_id)

    def _version_range(self, conn: Connection, table_id: int) -> tuple[int, int]:
        r = conn.execute(_VERSION_RANGE, {"table_id": table_id}).first()
        if r is None:
            raise NoSuchTable(f"{self._label(table_id)} no longer exists")
        return int(r[0]), int(r[1])

    def oldest_version(self, table_id: int) -> int:
        """Versions before this one were expired."""
        return self._table_number(table_id, tables.c.oldest_version)

    @_wraps_database_errors("expire versions")
    def expire(
        self, table_id: int, keep_from: int, *, unseen_before: int | None = None, reason: str = ""
    ) -> ExpireResult:
        """Forget versions before ``keep_from``: drop the rows of files no kept version needs, and return
        the paths no remaining row references (the caller deletes them).

        Tagged versions stay readable: the rows of their files are kept. A version untagged since the last
        expire gives up its files here too. No version a live consumer still needs goes: the oldest kept
        is at most the lowest consumer position. A consumer last seen before ``unseen_before``
        (microseconds; None: never) whose position holds back versions before ``keep_from`` is dropped
        instead (marked with the time and ``reason``; its next use raises ConsumerDropped) and returned.
        All under the table's lock, so a consumer registered or moved back meanwhile is seen.
        """

        def run(conn: Connection) -> ExpireResult:
            row = self._lock_table(conn, table_id, tables.c.version, tables.c.oldest_version)
            oldest = int(row.oldest_version)
            keep = max(min(keep_from, int(row.version)), oldest)
            dropped = self._drop_unseen(conn, table_id, keep, unseen_before, reason)
            pinned = conn.execute(
                sa.select(sa.func.min(consumers.c.version)).where(
                    consumers.c.table_id == table_id, consumers.c.dropped_at.is_(None)
                )
            ).scalar()
            if pinned is not None:
                keep = max(min(keep, int(pinned)), oldest)
            tagged = sa.exists().where(
                tags.c.table_id == table_id,
                tags.c.version >= files.c.added_version,
                tags.c.version < files.c.removed_version,
            )
            # A change log (added = removed = its commit) serves feeds from the version before its
            # commit: the kept version's log stays.
            log = files.c.content == "log"
            gone = conn.execute(
                sa.select(files.c.id, files.c.path).where(
                    files.c.table_id == table_id,
                    sa.or_(
                        sa.and_(~log, files.c.removed_version <= keep, ~tagged),
                        sa.and_(log, files.c.removed_version < keep),
                    ),
                )
            ).all()
            ids = [int(r.id) for r in gone]
            for i in range(0, len(ids), 500):
                conn.execute(files.delete().where(files.c.id.in_(ids[i : i + 500])))
            paths = sorted({r.path for r in gone})
            # A rollback re-adds a file of an older version as a new row: the file stays while a row needs it.
            still: set[str] = set()
            for i in range(0, len(paths), 500):
                still.update(
                    r[0]
                    for r in conn.execute(
                        sa.select(files.c.path).where(
                            files.c.table_id == table_id, files.c.path.in_(paths[i : i + 500])
                        )
                    )
                )
            if keep > oldest:
                conn.execute(tables.update().where(tables.c.id == table_id).values(oldest_version=keep))
            return ExpireResult([p for p in paths if p not in still], keep, dropped)

        return self._run(run)

    def _drop_unseen(
        self, conn: Connection, table_id: int, keep: int, unseen_before: int | None, reason: str
    ) -> list[ConsumerRecord]:
        """Mark dropped the live consumers last seen before ``unseen_before`` whose position is before
        ``keep`` (those that hold back what expire gives up); returns them as dropped."""
        if unseen_before is None:
            return []
        stale = conn.execute(
            sa.select(consumers).where(
                consumers.c.table_id == table_id,
                consumers.c.dropped_at.is_(None),
                consumers.c.last_seen < unseen_before,
                consumers.c.version < keep,
            )
        ).all()
        ts = now_micros()
        dropped = []
        for r in stale:
            why = (
                f"{reason}: last seen {micros_to_datetime(int(r.last_seen)).isoformat()}, at position "
                f"{int(r.version)} it held back versions {int(r.version)}..{keep - 1}"
            )
            # Checked again by the update: a consumer seen meanwhile (PostgreSQL) stays.
            res = conn.execute(
                consumers.update()
                .where(
                    consumers.c.table_id == table_id,
                    consumers.c.name == r.name,
                    consumers.c.dropped_at.is_(None),
                    consumers.c.last_seen < unseen_before,
                    consumers.c.version < keep,
                )
                .values(dropped_at=ts, dropped_reason=why)
            )
            if res.rowcount == 1:
                dropped.append(replace(_consumer(r), dropped_at=micros_to_datetime(ts), dropped_reason=why))
        return dropped

    def _lock_table(self, conn: Connection, table_id: int, *columns: sa.Column[Any]) -> Any:
        """The table's row, locked for this write transaction (SQLite: BEGIN IMMEDIATE already holds it)."""
        q = sa.select(*columns).where(tables.c.id == table_id)
        if self.dialect == "postgresql":
            q = q.with_for_update()
        row = conn.execute(q).first()
        if row is None:
            raise NoSuchTable(f"{self._label(table_id)} no longer exists")
        return row

    @staticmethod
    def _readable(conn: Connection, table_id: int, version: int, current: int, oldest: int) -> bool:
        """Whether ``version`` can be read: committed, and not expired (or kept by a tag)."""
        if version < 0 or version > current:
            return False
        if version >= oldest:
            return True
        return (
            conn.execute(
                sa.select(tags.c.name).where(tags.c.table_id == table_id, tags.c.version == version).limit(1)
            ).first()
            is not None
        )

    # -- tags ------------------------------------------------------------------------------------

    @_wraps_database_errors("tag a version")
    def create_tag(self, table_id: int, name: str, version: int | None, move: bool = False) -> int:
        """Name ``version`` (None: the current one); TagExists unless ``move``. Returns the version tagged.

        Runs under the table's lock, so a version being expired cannot be tagged half-way.
        """

        def run(conn: Connection) -> int:
            row = self._lock_table(conn, table_id, tables.c.version, tables.c.oldest_version)
            current, oldest = int(row.version), int(row.oldest_version)
            v = current if version is None else version
            # The name is checked first: without replace, an existing name is the error whatever the version.
            existing = conn.execute(
                sa.select(tags.c.version).where(tags.c.table_id == table_id, tags.c.name == name)
            ).first()
            if existing is not None and not move:
                raise TagExists(
                    f"tag {name!r} already names version {int(existing.version)}; pass replace=True to move it"
                )
            if not self._readable(conn, table_id, v, current, oldest):
                if 0 <= v < oldest:
                    raise NoSuchVersion(
                        f"version {v} has expired (readable: {oldest}..{current} and tagged versions)"
                    )
                raise NoSuchVersion(f"{self._label(table_id)} has versions {oldest}..{current}; got {v}")
            if existing is not None:
                conn.execute(
                    tags.update()
                    .where(tags.c.table_id == table_id, tags.c.name == name)
                    .values(version=v, created_at=now_micros())
                )
            else:
                conn.execute(
                    tags.insert().values(table_id=table_id, name=name, version=v, created_at=now_micros())
                )
            return v

        try:
            return self._run(run)
        except IntegrityError as e:  # a concurrent tag of the same name (PostgreSQL)
            raise TagExists(f"tag {name!r} was created concurrently; pass replace=True to move it") from e

    @_wraps_database_errors("remove a tag")
    def drop_tag(self, table_id: int, name: str) -> int:
        """Remove a tag; returns the version it named. Its files go at the next expire if no version needs them."""

        def run(conn: Connection) -> int:
            self._lock_table(conn, table_id, tables.c.version)
            v = conn.execute(
                sa.select(tags.c.version).where(tags.c.table_id == table_id, tags.c.name == name)
            ).scalar()
            if v is None:
                raise NoSuchTag(f"no tag {name!r}")
            conn.execute(tags.delete().where(tags.c.table_id == table_id, tags.c.name == name))
            return int(v)

        return self._run(run)

    @_wraps_database_errors("list tags")
    def list_tags(self, table_id: int) -> dict[str, int]:
        """Tag name -> version, sorted by name."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(tags.c.name, tags.c.version)
                .where(tags.c.table_id == table_id)
                .order_by(tags.c.name)
            ).all()
        return {r.name: int(r.version) for r in rows}

    @_wraps_database_errors("read a tag")
    def tag_version(self, table_id: int, name: str) -> int:
        """The version a tag names; NoSuchTag if none."""
        with self.engine.connect() as conn:
            v = conn.execute(
                sa.select(tags.c.version).where(tags.c.table_id == table_id, tags.c.name == name)
            ).scalar()
        if v is None:
            raise NoSuchTag(f"no tag {name!r}")
        return int(v)

    @_wraps_database_errors("read a version")
    def is_tagged(self, table_id: int, version: int) -> bool:
        """Whether a tag names this version (its files survive expire)."""
        with self.engine.connect() as conn:
            return self._tagged(conn, table_id, version)

    @staticmethod
    def _tagged(conn: Connection, table_id: int, version: int) -> bool:
        return (
            conn.execute(
                sa.select(tags.c.name).where(tags.c.table_id == table_id, tags.c.version == version).limit(1)
            ).first()
            is not None
        )

    # -- change-feed consumers ------------------------------------------------------------------

    @_wraps_database_errors("register a consumer")
    def create_consumer(self, table_id: int, name: str, version: int | None) -> tuple[ConsumerRecord, bool]:
        """The consumer ``name``, registered at ``version`` (None: the current one) if it does not exist;
        with whether this call created it. An existing one is returned as it is (``version`` ignored) and
        marked seen.

        Runs under the table's lock, so an expire cannot give up the version while it is registered.

        Raises:
            NoSuchVersion: ``version`` is not readable (expired, or not committed yet).
            ConsumerDropped: expire dropped a consumer of that name (drop it to register it again).
        """

        def run(conn: Connection) -> tuple[ConsumerRecord, bool]:
            row = self._lock_table(conn, table_id, tables.c.version, tables.c.oldest_version)
            current, oldest = int(row.version), int(row.oldest_version)
            ts = now_micros()
            known = conn.execute(
                sa.select(consumers.c.name).where(consumers.c.table_id == table_id, consumers.c.name == name)
            ).first()
            if known is not None:
                existing = self._consumer_row(conn, table_id, name)  # ConsumerDropped if expire dropped it
                conn.execute(self._where_consumer(consumers.update(), table_id, name).values(last_seen=ts))
                return replace(_consumer(existing), last_seen=micros_to_datetime(ts)), False
            v = current if version is None else version
            if not oldest <= v <= current:
                what = "has expired" if v < oldest else "does not exist"
                raise NoSuchVersion(
                    f"{self._label(table_id)}: version {v} {what}; a consumer starts at one of the readable "
                    f"versions {oldest}..{current}"
                )
            conn.execute(
                consumers.insert().values(
                    table_id=table_id, name=name, version=v, created_at=ts, last_seen=ts
                )
            )
            return ConsumerRecord(name, v, micros_to_datetime(ts), micros_to_datetime(ts)), True

        try:
            return self._run(run)
        except IntegrityError:  # registered concurrently (the table's lock makes this rare): that one
            return self.consumer(table_id, name, touch=True), False

    @_wraps_database_errors("read a consumer")
    def consumer(self, table_id: int, name: str, *, touch: bool = False) -> ConsumerRecord:
        """A live consumer; ``touch``: also mark it seen now (a write).

        Raises:
            NoSuchConsumer: there is none of that name.
            ConsumerDropped: expire dropped it.
        """
        if not touch:
            with self.engine.connect() as conn:
                return _consumer(self._consumer_row(conn, table_id, name))

        def run(conn: Connection) -> ConsumerRecord:
            found = _consumer(self._consumer_row(conn, table_id, name))
            ts = now_micros()
            conn.execute(self._where_consumer(consumers.update(), table_id, name).values(last_seen=ts))
            return replace(found, last_seen=micros_to_datetime(ts))

        return self._run(run)

    @_wraps_database_errors("read a consumer's changes")
    def claim_consumer(self, table_id: int, name: str, end: int | None) -> tuple[int, int]:
        """The range of changes ``(start, end]`` a consumer reads next, recorded as pending until a
        commit reaches its end, and the consumer marked seen.

        While a range is pending the next read is that same range: a feed to another version could miss
        keys a batch applied in part left behind (one inserted by it and deleted after it is in neither
        feed). Otherwise the range runs from the position to ``end`` (None: the newest version).

        Raises:
            InvalidInput: ``end`` is before the position, or differs from a pending range's end.
            NoSuchVersion: ``end`` is after the newest version.
            NoSuchConsumer: there is none of that name.
            ConsumerDropped: expire dropped it.
        """

        def run(conn: Connection) -> tuple[int, int]:
            current, _ = self._version_range(conn, table_id)
            found = _consumer(self._consumer_row(conn, table_id, name))
            ts = now_micros()
            where = self._where_consumer(consumers.update(), table_id, name)
            start, pending = found.position, found.pending
            if pending is not None:
                if end is not None and end != pending:
                    raise InvalidInput(
                        f"{self._label(table_id)}: consumer {name!r} read the changes {start}..{pending} and has "
                        f"not committed them: its next read is that range again (end_version {pending} or "
                        f"None), not one to {end}; commit {pending} once it is processed, or seek"
                    )
                conn.execute(where.values(last_seen=ts))
                return start, pending
            last = current if end is None else end
            if last > current:
                raise NoSuchVersion(
                    f"{self._label(table_id)}: version {last} does not exist (the newest is {current})"
                )
            if last < start:
                raise InvalidInput(
                    f"{self._label(table_id)}: end_version {last} is before consumer {name!r}'s position {start}"
                )
            conn.execute(where.values(last_seen=ts, pending=last if last > start else None))
            return start, last

        return self._run(run)

    @_wraps_database_errors("move a consumer")
    def advance_consumer(
        self, table_id: int, name: str, version: int, *, seek: bool = False
    ) -> ConsumerRecord:
        """Record that a consumer has processed the changes up to ``version``, and mark it seen.

        A commit only moves forward: a ``version`` at or before the position leaves it (concurrent commits
        keep the furthest); a pending range (see :meth:`claim_consumer`) ends once the position reaches
        its end. ``seek`` sets the position to ``version`` either way and drops a pending range; the
        version must then be readable (checked under the table's lock, against a concurrent expire).

        Raises:
            NoSuchVersion: ``version`` is after the newest version (or, with ``seek``, has expired).
            NoSuchConsumer: there is none of that name.
            ConsumerDropped: expire dropped it.
        """

        def run(conn: Connection) -> ConsumerRecord:
            if seek:
                row = self._lock_table(conn, table_id, tables.c.version, tables.c.oldest_version)
                current, oldest = int(row.version), int(row.oldest_version)
            else:
                current, oldest = self._version_range(conn, table_id)
            self._consumer_row(conn, table_id, name)  # raises for an unknown or a dropped one
            if version > current:
                raise NoSuchVersion(
                    f"{self._label(table_id)}: version {version} does not exist (the newest is {current}); "
                    f"consumer {name!r} cannot move past it"
                )
            ts = now_micros()
            where = self._where_consumer(consumers.update(), table_id, name)
            if seek:
                if version < oldest:
                    raise NoSuchVersion(
                        f"{self._label(table_id)}: version {version} has expired (readable: {oldest}..{current}); "
                        f"consumer {name!r} cannot move back to it"
                    )
                conn.execute(where.values(version=version, last_seen=ts, pending=None))
            else:
                # Compared in the update itself: a concurrent commit further on is never undone.
                moved = conn.execute(
                    where.where(consumers.c.version < version).values(version=version, last_seen=ts)
                )
                if moved.rowcount != 1:
                    conn.execute(where.values(last_seen=ts))
            return _consumer(self._consumer_row(conn, table_id, name))

        return self._run(run)

    @_wraps_database_errors("drop a consumer")
    def drop_consumer(self, table_id: int, name: str) -> ConsumerRecord:
        """Remove a consumer (live or dropped by expire); returns it as it was. Versions it held go at the
        next expire.

        Raises:
            NoSuchConsumer: there is none of that name.
        """

        def run(conn: Connection) -> ConsumerRecord:
            r = conn.execute(
                sa.select(consumers).where(consumers.c.table_id == table_id, consumers.c.name == name)
            ).first()
            if r is None:
                raise NoSuchConsumer(f"{self._label(table_id)} has no consumer {name!r}")
            conn.execute(consumers.delete().where(consumers.c.table_id == table_id, consumers.c.name == name))
            return _consumer(r, dropped_ok=True)

        return self._run(run)

    @_wraps_database_errors("list consumers")
    def list_consumers(self, table_id: int) -> list[ConsumerRecord]:
        """The table's consumers, those expire dropped included, sorted by name."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(consumers).where(consumers.c.table_id == table_id).order_by(consumers.c.name)
            ).all()
        return [_consumer(r, dropped_ok=True) for r in rows]

    def _consumer_row(self, conn: Connection, table_id: int, name: str) -> Any:
        """The consumer's row; NoSuchConsumer if none, ConsumerDropped if expire dropped it."""
        r = conn.execute(
            sa.select(consumers).where(consumers.c.table_id == table_id, consumers.c.name == name)
        ).first()
        if r is None:
            raise NoSuchConsumer(f"{self._label(table_id)} has no consumer {name!r}")
        if r.dropped_at is not None:
            raise ConsumerDropped(
                f"{self._label(table_id)}: consumer {name!r} was dropped by expire at "
                f"{micros_to_datetime(int(r.dropped_at)).isoformat()} ({r.dropped_reason}); the changes after "
                f"its position {int(r.version)} may be gone. Rebuild what it fed from a snapshot, then drop "
                "the consumer and register it again"
            )
        return r

    @staticmethod
    def _where_consumer(q: Any, table_id: int, name: str) -> Any:
        """``q`` (an update) limited to a live consumer."""
        return q.where(
            consumers.c.table_id == table_id, consumers.c.name == name, consumers.c.dropped_at.is_(None)
        )

    @_wraps_database_errors("read the spec changes after a version")
    def specs_after(self, table_id: int, version: int) -> list[tuple[int, str]]:
        """(version, spec JSON) of every commit after ``version`` that changed the table's spec."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(commits.c.version, commits.c.spec)
                .where(
                    commits.c.table_id == table_id, commits.c.version > version, commits.c.spec.is_not(None)
                )
                .order_by(commits.c.version)
            ).all()
        return [(int(r.version), str(r.spec)) for r in rows]

    @_wraps_database_errors("read a version's spec")
    def spec_at(self, table_id: int, version: int) -> str | None:
        """The table's spec (JSON) in force at ``version``; None when the catalog cannot tell (a table
        created before the create commit recorded its spec, whose spec changed after ``version``)."""
        with self.engine.connect() as conn:
            at = conn.execute(
                sa.select(commits.c.spec)
                .where(
                    commits.c.table_id == table_id, commits.c.version <= version, commits.c.spec.is_not(None)
                )
                .order_by(commits.c.version.desc())
                .limit(1)
            ).scalar()
            if at is not None:
                return str(at)
            later = conn.execute(
                sa.select(commits.c.version)
                .where(
                    commits.c.table_id == table_id, commits.c.version > version, commits.c.spec.is_not(None)
                )
                .limit(1)
            ).first()
            if later is not None:
                return None
            current = conn.execute(sa.select(tables.c.spec).where(tables.c.id == table_id)).scalar()
        if current is None:
            raise NoSuchTable(f"{self._label(table_id)} no longer exists")
        return str(current)

    @_wraps_database_errors("find a version by time")
    def version_as_of(self, table_id: int, micros: int) -> int:
        with self.engine.connect() as conn:
            v = conn.execute(
                sa.select(sa.func.max(commits.c.version)).where(
                    commits.c.table_id == table_id, commits.c.committed_at <= micros
                )
            ).scalar()
        if v is None:
            with self.engine.connect() as conn:
                first = conn.execute(
                    sa.select(sa.func.min(commits.c.committed_at)).where(commits.c.table_id == table_id)
                ).scalar()
            try:
                when = micros_to_datetime(micros).isoformat()
            except OverflowError:  # an instant before year 1 in UTC (e.g. 0001-01-01T00:00+01:00)
                when = "year 1"
            created = (
                "" if first is None else f": it was created at {micros_to_datetime(int(first)).isoformat()}"
            )
            raise NoSuchVersion(f"{self._label(table_id)} has no version at or before {when}{created}")
        return int(v)

    @_wraps_database_errors("list a version's files")
    def files_at(self, table_id: int, version: int, *, expired_ok: bool = False) -> list[FileEntry]:
        """The live files of a table at a version, ordered by sequence. NoSuchVersion where the version
        has expired, also when expire ran while they were being listed (its rows would be partial);
        ``expired_ok``: the rows an expired version has left (expire's own accounting)."""
        with self.engine.connect() as conn:
            found = [
                self._file(r) for r in conn.execute(_FILES_AT, {"table_id": table_id, "version": version})
            ]
            if expired_ok:
                return found
            # Checked after the listing: under READ COMMITTED an expire committed in between shows here.
            current, oldest = self._version_range(conn, table_id)
            if version > current:
                raise NoSuchVersion(f"version {version} does not exist (the newest is {current})")
            if version < oldest and not self._tagged(conn, table_id, version):
                raise NoSuchVersion(f"version {version} has expired (the oldest readable is {oldest})")
        return found

    @_wraps_database_errors("list the files a version range changed")
    def files_changed(self, table_id: int, after: int, upto: int) -> list[tuple[FileEntry, int | None]]:
        """Files added or removed by the commits ``after < version <= upto``, with the version that
        removed each (None: still live at ``upto``)."""
        with self.engine.connect() as conn:
            return self._files_changed(conn, table_id, after, upto)

    @_wraps_database_errors("read the commits of a version range")
    def version_range_changes(self, table_id: int, after: int, upto: int | None) -> VersionRangeChanges:
        """The commits ``after < version <= upto`` (None: the newest version) and the files they changed,
        with the table's version range, from one connection (a change feed's whole plan)."""
        with self.engine.connect() as conn:
            current, oldest = self._version_range(conn, table_id)
            last = current if upto is None else upto
            # Parameters at execution: ``.params()`` would copy the statement and key it again every call.
            bound = {"table_id": table_id, "after": after, "upto": last}
            snapshots = self._snapshots(conn, table_id, oldest, _COMMITS_BETWEEN, after < oldest, bound)
            files = self._files_changed(conn, table_id, after, last)
        return VersionRangeChanges(current, oldest, snapshots, files)

    def _files_changed(
        self, conn: Connection, table_id: int, after: int, upto: int
    ) -> list[tuple[FileEntry, int | None]]:
        out = []
        for r in conn.execute(_FILES_CHANGED, {"table_id": table_id, "after": after, "upto": upto}):
            removed = r.removed_version
            gone = None if removed is None or int(removed) > upto else int(removed)
            out.append((self._file(r), gone))
        return out

    @_wraps_database_errors("look up a table's files")
    def referenced_paths(self, table_id: int, paths: Sequence[str], settled: bool = False) -> set[str]:
        """Those of ``paths`` some file row of the table (of any version, expired ones too) references.

        ``settled``: first take the lock a commit to the table holds, so that a commit the server is still
        landing (for a client interrupted while it waited for the COMMIT) has landed or rolled back: a
        path not found then is never referenced later by that commit."""
        found: set[str] = set()
        with self.engine.connect() as conn, conn.begin():
            if settled and self.dialect == "postgresql":
                conn.execute(sa.text(f"SET LOCAL lock_timeout = '{LANDED_LOOKUP_WAIT_S}s'"))
                conn.execute(_HEADS_LOCKED, {"ids": [table_id]}).all()
            for start in range(0, len(paths), 500):  # bounded IN lists
                chunk = list(paths[start : start + 500])
                found.update(
                    r[0]
                    for r in conn.execute(
                        sa.select(files.c.path).where(files.c.table_id == table_id, files.c.path.in_(chunk))
                    )
                )
        return found

    @_wraps_database_errors("list a table's files")
    def all_file_paths(self, table_id: int) -> set[str]:
        with self.engine.connect() as conn:
            return {r[0] for r in conn.execute(sa.select(files.c.path).where(files.c.table_id == table_id))}

    @staticmethod
    def _file(r: Any) -> FileEntry:
        return FileEntry(
            path=r.path,
            partition=r.partition,
            bucket=int(r.bucket),
            row_count=int(r.row_count),
            size_bytes=int(r.size_bytes),
            content=r.content,
            columns=None if r.columns is None else json.loads(r.columns),
            seq=int(r.seq),
            id=int(r.id),
            added_version=int(r.added_version),
        )

    @_wraps_database_errors("read the history")
    def history(self, table_id: int, after: int | None = None, upto: int | None = None) -> list[Snapshot]:
        """Every commit (``after < version <= upto`` where given), oldest first; those before the oldest
        readable version are marked expired."""
        q = sa.select(commits).where(commits.c.table_id == table_id)
        if after is not None:
            q = q.where(commits.c.version > after)
        if upto is not None:
            q = q.where(commits.c.version <= upto)
        q = q.order_by(commits.c.version)
        with self.engine.connect() as conn:
            oldest = conn.execute(sa.select(tables.c.oldest_version).where(tables.c.id == table_id)).scalar()
            if oldest is None:
                raise NoSuchTable(f"{self._label(table_id)} no longer exists")
            return self._snapshots(conn, table_id, int(oldest), q, tags_needed=True)

    @staticmethod
    def _snapshots(
        conn: Connection,
        table_id: int,
        oldest: int,
        q: sa.Select[Any],
        tags_needed: bool,
        bound: dict[str, Any] | None = None,
    ) -> list[Snapshot]:
        """The commits ``q`` selects (with parameters ``bound``), those before ``oldest`` and untagged marked
        expired (``tags_needed`` False: ``q`` selects none before ``oldest``)."""
        tagged = (
            {int(r[0]) for r in conn.execute(sa.select(tags.c.version).where(tags.c.table_id == table_id))}
            if tags_needed
            else set()
        )
        return [
            _snapshot(r, expired=int(r.version) < oldest and int(r.version) not in tagged)
            for r in conn.execute(q, bound or {})
        ]

    @_wraps_database_errors("read a version")
    def snapshot(self, table_id: int, version: int) -> Snapshot:
        """The commit that made ``version``."""
        with self.engine.connect() as conn:
            oldest = conn.execute(sa.select(tables.c.oldest_version).where(tables.c.id == table_id)).scalar()
            r = conn.execute(
                sa.select(commits).where(commits.c.table_id == table_id, commits.c.version == version)
            ).first()
            tagged = (
                oldest is not None
                and version < int(oldest)
                and conn.execute(
                    sa.select(tags.c.name)
                    .where(tags.c.table_id == table_id, tags.c.version == version)
                    .limit(1)
                ).first()
                is not None
            )
        if oldest is None:
            raise NoSuchTable(f"{self._label(table_id)} no longer exists")
        if r is None:
            raise NoSuchVersion(f"{self._label(table_id)} has no version {version}")
        return _snapshot(r, expired=version < int(oldest) and not tagged)

    @_wraps_database_errors("read a version")
    def has_commit(self, table_id: int, version: int) -> bool:
        with self.engine.connect() as conn:
            return (
                conn.execute(
                    sa.select(commits.c.version).where(
                        commits.c.table_id == table_id, commits.c.version == version
                    )
                ).first()
                is not None
            )

    @_wraps_database_errors("look up an idempotency key")
    def find_idempotent(self, table_id: int, key: str) -> Snapshot | None:
        with self.engine.connect() as conn:
            r = conn.execute(
                sa.select(commits).where(commits.c.table_id == table_id, commits.c.idempotency_key == key)
            ).first()
        return None if r is None else _snapshot(r)

    # -- commit ----------------------------------------------------------------------------------

    @_wraps_database_errors("commit")
    def commit(
        self,
        table_id: int,
        *,
        base_version: int,
        operation: str,
        add: Sequence[FileEntry] = (),
        remove: Iterable[int] = (),
        summary: dict[str, Any] | None = None,
        validate: Callable[[ConcurrentChanges], None] | None = None,
        idempotency_key: str | None = None,
        spec: str | None = None,
        restores: int | None = None,
        written_since: int | None = None,
        written_since_exact: bool = False,
    ) -> CommitResult:
        """Atomically add and remove files as a new table version.

        ``validate`` sees what landed after ``base_version`` and raises :class:`CommitConflict` if this
        commit cannot be rebased onto it. Files to remove that are already gone are always a conflict.
        ``restores``: the version whose files this commit adds again (a rollback); if an expire gave it up
        meanwhile the commit raises :class:`NoSuchVersion` and changes nothing. ``written_since``: when
        the oldest file of ``add`` began to be written (microseconds): by the writer's clock, trusted within
        :data:`~mere.metadata.CLOCK_MARGIN_MICROS`, or ``written_since_exact``, the store's time of that
        file; a cleanup fenced after it (see :meth:`fence_cleanup`) refuses the commit with
        :class:`OutlivedCleanup`.
        """
        request = CommitRequest(
            table_id,
            base_version,
            operation,
            add,
            remove,
            summary,
            validate,
            idempotency_key,
            spec,
            restores,
            written_since=written_since,
            written_since_exact=written_since_exact,
        )
        landed = self._commit([request], None, [self._label(table_id)])
        assert landed is not None  # no transaction key
        return landed[0]

    @_wraps_database_errors("commit a catalog transaction")
    def commit_tables(
        self,
        requests: Sequence[CommitRequest],
        names: Sequence[str],
        transaction_key: str | None = None,
        unchanged: Mapping[str, int] | None = None,
    ) -> list[CommitResult] | None:
        """Land several tables' commits in one database transaction: each a new version of its table, or
        none of them.

        Each request is checked as :meth:`commit` checks one (its validator, its files, its idempotency
        key); one that cannot land fails them all. The tables are locked in id order and every new version
        gets the same commit time, no older than any of the tables' newest (so ``as_of`` reads see all of a
        transaction's versions or none). Requests with ``create`` make their table first.

        Args:
            requests: One prepared commit per table (never two for one table).
            names: The tables' names (``namespace.name``), in the order of ``requests``.
            transaction_key: The catalog transaction's idempotency key, recorded with the versions.
            unchanged: The transaction's other tables, name -> table id: recorded with the key as left
                unchanged, so that a replay of the transaction names the same tables.

        Returns:
            The commits, in the order of ``requests``; None when ``transaction_key`` had committed already
            (see :meth:`find_transaction`): nothing was written.

        Raises:
            CommitConflict: A table's validator refused what landed on it, or a file it removes was gone.
            TableExists: A table to create exists.
            NoSuchTable: A table was dropped.
            CommitFailed: The database connection failed before the transaction landed.
            CommitStateUnknown: The connection failed while committing: it may have landed.
        """
        if any(r.create is not None for r in requests):
            self._ensure_schema(create=True)  # a catalog's first commit may be a transaction creating tables
        return self._commit(requests, transaction_key, names, unchanged or {})

    @_wraps_database_errors("look up a catalog transaction")
    def transaction_committed_at(self, key: str) -> dt.datetime | None:
        """When the catalog transaction with idempotency ``key`` committed; None if there is none."""
        if not self._ensure_schema(create=False):
            return None
        with self.engine.connect() as conn:
            at = conn.execute(
                sa.select(transactions.c.committed_at).where(transactions.c.key == key)
            ).scalar()
        return None if at is None else micros_to_datetime(int(at))

    @_wraps_database_errors("look up a catalog transaction")
    def find_transaction(self, key: str) -> dict[str, tuple[int, int | None]] | None:
        """The tables a catalog transaction with idempotency ``key`` committed: name -> (table id, version;
        None for a table it left unchanged); None if there is none."""
        if not self._ensure_schema(create=False):
            return None
        with self.engine.connect() as conn:
            found = conn.execute(sa.select(transactions.c.tables).where(transactions.c.key == key)).scalar()
        if found is None:
            return None
        return {
            name: (int(v[0]), None if v[1] is None else int(v[1])) for name, v in json.loads(found).items()
        }

    @_wraps_database_errors("read the tables' versions")
    def table_versions(self, as_of: int | None = None) -> list[tuple[TableRecord, int]]:
        """Every table with the version a read point sees, from one statement (one database snapshot: a
        catalog transaction is seen whole or not at all).

        Args:
            as_of: Microseconds since the epoch: each table's newest version committed at or before it
                (tables created after it are left out); None: the current versions.

        Returns:
            (record, version) pairs, by name.
        """
        if not self._ensure_schema(create=False):
            return []
        if as_of is None:
            version: Any = tables.c.version
        else:
            version = (
                sa.select(sa.func.max(commits.c.version))
                .where(commits.c.table_id == tables.c.id, commits.c.committed_at <= as_of)
                .scalar_subquery()
            )
        q = sa.select(tables, version.label("pinned")).order_by(tables.c.namespace, tables.c.name)
        out = []
        with self.engine.connect() as conn:
            for r in conn.execute(q):
                if r.pinned is None:
                    continue
                record = TableRecord(r.id, r.namespace, r.name, r.uuid, r.location, r.spec, int(r.version))
                out.append((self._named(record), int(r.pinned)))
        return out

    def _commit(
        self,
        requests: Sequence[CommitRequest],
        transaction_key: str | None,
        names: Sequence[str],
        unchanged: Mapping[str, int] | None = None,
    ) -> list[CommitResult] | None:
        tokens = [uuid.uuid4().hex for _ in requests]

        def run(conn: Connection) -> list[CommitResult] | None:
            if transaction_key is not None and (
                conn.execute(
                    sa.select(transactions.c.key).where(transactions.c.key == transaction_key)
                ).first()
                is not None
            ):
                return None
            ids = [r.table_id if r.create is None else self._create(conn, r.create) for r in requests]
            heads = {
                int(h.id): (int(h.version), 0 if h.committed_at is None else int(h.committed_at))
                for h in conn.execute(_HEADS_LOCKED if self.dialect == "postgresql" else _HEADS, {"ids": ids})
            }
            for table_id in ids:
                if table_id not in heads:
                    raise NoSuchTable(f"{self._label(table_id)} was dropped before the commit")
            self._check_fences(conn, requests, ids)
            # One time for every version of the transaction, never older than a table's newest commit:
            # then each table's commit times rise with its versions, and an ``as_of`` that sees one of the
            # transaction's versions sees all of them.
            ts = max(now_micros(), *(heads[i][1] + 1 for i in ids))
            out = [
                self._land(conn, r, i, heads[i][0], ts, t, transaction_key)
                for r, i, t in zip(requests, ids, tokens, strict=True)
            ]
            if transaction_key is not None:
                landed: dict[str, list[int | None]] = {n: [i, None] for n, i in (unchanged or {}).items()}
                landed |= {
                    n: [i, None if r.no_change or r.already_committed else r.version]
                    for n, i, r in zip(names, ids, out, strict=True)
                }
                conn.execute(
                    transactions.insert().values(
                        key=transaction_key, committed_at=ts, tables=json.dumps(landed)
                    )
                )
            return out

        label = self._label(requests[0].table_id) if len(requests) == 1 else f"tables {', '.join(names)}"
        try:
            return self._run(run)
        except IntegrityError as e:
            if transaction_key is not None and self.find_transaction(transaction_key) is not None:
                return None  # the same transaction landed meanwhile
            one = requests[0]
            if len(requests) == 1 and one.idempotency_key is not None and one.create is None:
                prior = self.find_idempotent(one.table_id, one.idempotency_key)
                if prior is not None:
                    return [CommitResult.of(prior, already_committed=True)]
            for r in requests:
                if r.create is not None and self._exists(r.create.namespace, r.create.name):
                    raise TableExists(f"table {r.create.namespace}.{r.create.name} already exists") from e
            raise CatalogError(f"commit to {label} violated a catalog constraint: {e}") from e
        except DBAPIError as e:
            if not (isinstance(e, OperationalError) or e.connection_invalidated):
                raise
            # The connection died; the server may have the COMMIT and still be landing it: look for our
            # tokens once whatever the dead connection's transaction held is released.
            try:
                found = self._landed_tokens(tokens, [r.table_id for r in requests if r.create is None])
            except DBAPIError:
                raise CommitStateUnknown(f"commit to {label} may or may not have landed: {e}") from e
            if found:  # one transaction: all of them landed
                return [CommitResult.of(_snapshot(found[t])) for t in tokens]
            raise CommitFailed(f"commit to {label} did not land (nothing changed): {_first_line(e)}") from e

    def _landed_tokens(self, tokens: Sequence[str], table_ids: Sequence[int]) -> dict[str, Any]:
        """The commit rows of ``tokens`` that landed, read in a write transaction that first takes the locks a
        commit to ``table_ids`` holds: a commit the server is still landing for a dead connection has ended
        (landed, or rolled back) by then, so a token not found never lands later."""
        lookup = sa.select(commits).where(commits.c.token.in_(tokens))
        if self.dialect != "postgresql":  # an embedded database: no server lands anything after an error
            with self.engine.connect() as conn:
                return {r.token: r for r in conn.execute(lookup)}
        with self.engine.connect() as conn, conn.begin():
            conn.execute(sa.text(f"SET LOCAL lock_timeout = '{LANDED_LOOKUP_WAIT_S}s'"))
            if table_ids:
                conn.execute(_HEADS_LOCKED, {"ids": list(table_ids)}).all()
            return {r.token: r for r in conn.execute(lookup)}

    def _check_fences(self, conn: Connection, requests: Sequence[CommitRequest], ids: Sequence[int]) -> None:
        """Refuse commits whose files a cleanup fenced after they began to be written may have deleted."""
        # A writer's clock is trusted within CLOCK_MARGIN_MICROS of the store's; a commit that came closer
        # to a fence gave its files' own times (Commit.pin_written_since), compared exactly.
        since = {
            i: r.written_since - (0 if r.written_since_exact else CLOCK_MARGIN_MICROS)
            for r, i in zip(requests, ids, strict=True)
            if r.written_since and r.add
        }
        if not since:
            return
        keys = {_fence_key(i): i for i in since}
        for key, value in conn.execute(
            sa.select(catalog_info.c.key, catalog_info.c.value).where(catalog_info.c.key.in_(list(keys)))
        ):
            table_id = keys[key]
            if int(value) > since[table_id]:
                raise OutlivedCleanup(
                    f"{self._label(table_id)}: a cleanup of files older than "
                    f"{micros_to_datetime(int(value)):%Y-%m-%d %H:%M:%S} UTC ran while "
                    "this write was made, so its files may be gone: nothing was committed; write again, and "
                    "give cleanup an older_than longer than the longest write takes"
                )

    @_wraps_database_errors("read a cleanup fence")
    def cleanup_fence(self, table_id: int) -> int | None:
        """The newest cutoff a cleanup of the table fenced (microseconds since the epoch), or None."""
        if not self._ensure_schema(create=False):
            return None
        with self.engine.connect() as conn:
            held = conn.execute(
                sa.select(catalog_info.c.value).where(catalog_info.c.key == _fence_key(table_id))
            ).scalar()
        return None if held is None else int(held)

    @_wraps_database_errors("fence a cleanup")
    def fence_cleanup(self, table_id: int, cutoff_micros: int) -> None:
        """Record, before a cleanup lists anything, that it may delete the table's unreferenced files older
        than ``cutoff_micros``: a commit of files written before that is refused from now on (their files
        may be among those deleted), and one landing before is referenced when the cleanup looks.

        Args:
            table_id: The table.
            cutoff_micros: Microseconds since the epoch; a fence only ever moves forward.
        """
        self._ensure_schema(create=True)
        key = _fence_key(table_id)

        def run(conn: Connection) -> None:
            self._lock_table(conn, table_id, tables.c.id)  # ordered with the table's commits
            held = conn.execute(sa.select(catalog_info.c.value).where(catalog_info.c.key == key)).scalar()
            if held is None:
                conn.execute(catalog_info.insert().values(key=key, value=str(cutoff_micros)))
            elif int(held) < cutoff_micros:
                conn.execute(
                    catalog_info.update().where(catalog_info.c.key == key).values(value=str(cutoff_micros))
                )

        self._run(run)

    def _exists(self, namespace: str, name: str) -> bool:
        with self.engine.connect() as conn:
            q = sa.select(tables.c.id).where(tables.c.namespace == namespace, tables.c.name == name)
            return conn.execute(q).first() is not None

    def _create(self, conn: Connection, new: NewTable) -> int:
        """Insert a table (and its namespace, and its version 0) in a commit's transaction; its id."""
        if (
            conn.execute(sa.select(namespaces.c.name).where(namespaces.c.name == new.namespace)).first()
            is None
        ):
            conn.execute(namespaces.insert().values(name=new.namespace, created_at=now_micros()))
        ts = now_micros()
        res = conn.execute(
            tables.insert().values(
                namespace=new.namespace,
                name=new.name,
                uuid=new.uuid,
                location=new.location,
                spec=new.spec,
                version=0,
                created_at=ts,
            )
        )
        table_id = int(res.inserted_primary_key[0])  # type: ignore[index]
        conn.execute(
            commits.insert().values(
                table_id=table_id,
                version=0,
                committed_at=ts,
                operation="create",
                token=uuid.uuid4().hex,
                summary=json.dumps({"added_files": 0, "removed_files": 0, "added_rows": 0}),
                spec=new.spec,
            )
        )
        self._names[table_id] = f"{new.namespace}.{new.name}"
        return table_id

    def _land(
        self,
        conn: Connection,
        request: CommitRequest,
        table_id: int,
        current: int,
        ts: int,
        token: str,
        transaction_key: str | None = None,
    ) -> CommitResult:
        """One table's commit in an open transaction that holds the table's lock (at version ``current``).

        The version records the request's own idempotency key, else the catalog transaction's
        (``transaction_key``), unless a version of this table holds that key already (a one-table commit
        made under the same key): keys stay unique per table.
        """
        r = request
        recorded = r.idempotency_key
        if recorded is None and transaction_key is not None:
            taken = conn.execute(
                sa.select(commits.c.version).where(
                    commits.c.table_id == table_id, commits.c.idempotency_key == transaction_key
                )
            ).first()
            recorded = None if taken is not None else transaction_key
        remove_ids = sorted(set(r.remove))
        summary = dict(r.summary or {})
        if r.restores is not None:
            oldest = int(
                conn.execute(sa.select(tables.c.oldest_version).where(tables.c.id == table_id)).scalar_one()
            )
            if not self._readable(conn, table_id, r.restores, current, oldest):
                raise NoSuchVersion(
                    f"{self._label(table_id)}: version {r.restores} was expired before the rollback committed"
                )
        if r.idempotency_key is not None:
            prior = conn.execute(
                sa.select(commits).where(
                    commits.c.table_id == table_id, commits.c.idempotency_key == r.idempotency_key
                )
            ).first()
            if prior is not None:
                return CommitResult.of(_snapshot(prior), already_committed=True)
        if current < r.base_version:
            raise CommitConflict(
                f"{self._label(table_id)} is at version {current}, older than {r.base_version}"
            )
        if current != r.base_version and r.validate is not None:
            r.validate(self._changes_since(conn, table_id, r.base_version, current))
        new = current + 1
        if remove_ids:
            done = 0
            for i in range(0, len(remove_ids), 500):
                chunk = remove_ids[i : i + 500]
                res = conn.execute(
                    files.update()
                    .where(
                        files.c.table_id == table_id,
                        files.c.id.in_(chunk),
                        files.c.removed_version.is_(None),
                    )
                    .values(removed_version=new)
                )
                done += res.rowcount
            if done != len(remove_ids):
                raise CommitConflict(
                    f"{self._label(table_id)}: {len(remove_ids) - done} file(s) this commit replaces were already "
                    "removed by a concurrent commit"
                )
        if r.add:
            conn.execute(
                files.insert(),
                [
                    {
                        "table_id": table_id,
                        "path": f.path,
                        "partition": f.partition,
                        "bucket": f.bucket,
                        "seq": f.seq if f.seq is not None else (new << SEQ_SHIFT) | f.order,
                        "added_version": new,
                        # A change log belongs to its commit alone: live at no version, it is
                        # listed by the change feed and dropped when that commit expires.
                        "removed_version": new if f.content == "log" else None,
                        "row_count": f.row_count,
                        "size_bytes": f.size_bytes,
                        "content": f.content,
                        "columns": None if f.columns is None else json.dumps(f.columns),
                    }
                    for f in r.add
                ],
            )
        conn.execute(
            commits.insert().values(
                table_id=table_id,
                version=new,
                committed_at=ts,
                operation=r.operation,
                token=token,
                idempotency_key=recorded,
                summary=json.dumps(summary),
                spec=r.spec,
            )
        )
        changes: dict[str, Any] = {"version": new} if r.spec is None else {"version": new, "spec": r.spec}
        res = conn.execute(
            tables.update().where(tables.c.id == table_id, tables.c.version == current).values(**changes)
        )
        if res.rowcount != 1:
            raise CommitConflict(f"{self._label(table_id)} moved past version {current} during the commit")
        return CommitResult.of(Snapshot.from_stored(new, ts, r.operation, summary, idempotency_key=recorded))

    def _changes_since(self, conn: Connection, table_id: int, base: int, current: int) -> ConcurrentChanges:
        rows = conn.execute(
            sa.select(commits)
            .where(
                commits.c.table_id == table_id,
                commits.c.version > base,
                commits.c.version <= current,
            )
            .order_by(commits.c.version)
        )
        out = ConcurrentChanges([_snapshot(r) for r in rows])
        removed = conn.execute(
            sa.select(files.c.id).where(
                files.c.table_id == table_id,
                files.c.removed_version > base,
                files.c.removed_version <= current,
            )
        )
        out.removed_file_ids = {int(r[0]) for r in removed}
        return out


def _consumer(row: Any, dropped_ok: bool = False) -> ConsumerRecord:
    dropped = None if row.dropped_at is None else micros_to_datetime(int(row.dropped_at))
    assert dropped_ok or dropped is None, row
    return ConsumerRecord(
        str(row.name),
        int(row.version),
        micros_to_datetime(int(row.created_at)),
        micros_to_datetime(int(row.last_seen)),
        None if row.pending is None or int(row.pending) <= int(row.version) else int(row.pending),
        dropped,
        None if row.dropped_reason is None else str(row.dropped_reason),
    )


def _snapshot(row: Any, expired: bool = False) -> Snapshot:
    return Snapshot.from_stored(
        int(row.version),
        int(row.committed_at),
        row.operation,
        json.loads(row.summary),
        expired,
        row.idempotency_key,
    )


def mere_version() -> str:
    import mere

    return mere.__version__


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
