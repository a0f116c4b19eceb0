"""SQL catalog over SQLAlchemy Core: SQLite embedded by default, PostgreSQL when shared.

Commit protocol: data files are written first; a commit then runs one transaction that locks the
table row (``BEGIN IMMEDIATE`` on SQLite, ``SELECT ... FOR UPDATE`` on PostgreSQL), lets the caller
validate the commits that landed since it read, inserts the new files and the commit row, and bumps
the table version with a compare-and-swap. Nothing is visible until that transaction commits.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from mere.errors import (
    CatalogError,
    CommitConflict,
    CommitStateUnknown,
    InvalidInput,
    NoSuchTable,
    NoSuchVersion,
    NotInstalled,
    TableExists,
)
from mere.metadata import (
    SEQ_SHIFT,
    CommitResult,
    ConcurrentChanges,
    FileEntry,
    Snapshot,
    TableRecord,
    micros_to_datetime,
    now_micros,
)

log = logging.getLogger(__name__)

_metadata = sa.MetaData()

namespaces = sa.Table(
    "mere_namespaces", _metadata,
    sa.Column("name", sa.String(255), primary_key=True),
    sa.Column("created_at", sa.BigInteger, nullable=False),
)

tables = sa.Table(
    "mere_tables", _metadata,
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
    "mere_commits", _metadata,
    sa.Column("table_id", sa.Integer, primary_key=True),
    sa.Column("version", sa.BigInteger, primary_key=True),
    sa.Column("committed_at", sa.BigInteger, nullable=False),  # microseconds since the epoch, UTC
    sa.Column("operation", sa.String(32), nullable=False),
    sa.Column("token", sa.String(32), nullable=False, unique=True),
    sa.Column("idempotency_key", sa.String(255), nullable=True),
    sa.Column("summary", sa.Text, nullable=False),
    sa.UniqueConstraint("table_id", "idempotency_key", name="mere_commits_idempotency"),
)

files = sa.Table(
    "mere_files", _metadata,
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
        try:
            parsed = sa.engine.make_url(url)
        except sa.exc.ArgumentError as e:
            raise InvalidInput(f"catalog {url!r} is not a database URL: use sqlite:///path or "
                               "postgresql://user@host/db") from e
        if parsed.get_backend_name() not in ("sqlite", "postgresql"):
            raise InvalidInput(f"catalog {self._safe_url()!r}: mere's catalog runs on SQLite (sqlite:///path) or "
                               "PostgreSQL (postgresql://user@host/db)")
        if parsed.get_backend_name() == "postgresql":
            try:
                import psycopg  # noqa: F401
            except ImportError as e:
                raise NotInstalled("a PostgreSQL catalog needs psycopg: pip install 'mere[postgres]'") from e
        # A file database is created by the first write, never by opening or reading it.
        self._sqlite_file = parsed.database if parsed.get_backend_name() == "sqlite" and parsed.database not in (
            None, "", ":memory:") else None

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
            engine = sa.create_engine(self.url, connect_args={"timeout": 60, "check_same_thread": False},
                                      pool_size=4, max_overflow=16)

            @event.listens_for(engine, "connect")
            def _connect(dbapi_conn: Any, _record: Any) -> None:
                dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute("PRAGMA busy_timeout=60000")
                cur.close()

            @event.listens_for(engine, "begin")
            def _begin(conn: Connection) -> None:
                # Writers take the lock up front so they queue instead of deadlocking; readers never block.
                write = conn.get_execution_options().get("mere_write", False)
                conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

            return engine
        return sa.create_engine(self.url, pool_pre_ping=True, pool_size=2, max_overflow=8)

    def _ensure_schema(self, create: bool) -> bool:
        """Whether the catalog's tables exist; with ``create``, make them (and a SQLite file) if not."""
        if self._ready:
            return True
        if self._sqlite_file is not None and not os.path.exists(self._sqlite_file):
            if not create:
                return False
            os.makedirs(os.path.dirname(os.path.abspath(self._sqlite_file)), exist_ok=True)
        for attempt in range(10):
            try:
                with self.engine.begin() as conn:
                    if sa.inspect(conn).has_table(tables.name) and not create:
                        self._ready = True
                        return True
                    if not create:
                        return False
                    if self.dialect == "postgresql":
                        conn.execute(sa.text("SELECT pg_advisory_xact_lock(727265)"))
                    _metadata.create_all(conn, checkfirst=True)
                self._ready = True
                return True
            except (OperationalError, IntegrityError) as e:
                if attempt == 9 or not _is_transient(e):
                    raise CatalogError(f"cannot open catalog {self._safe_url()}: {_first_line(e)}") from e
                time.sleep(0.05 * (attempt + 1))
        raise AssertionError("unreachable")

    def _safe_url(self) -> str:
        return sa.engine.make_url(self.url).render_as_string(hide_password=True)

    def __repr__(self) -> str:
        return f"SqlCatalog({self._safe_url()!r})"

    def _run(self, fn: Callable[[Connection], Any]) -> Any:
        """Run fn in a transaction, retrying transient lock and serialisation failures."""
        delay = 0.005
        for attempt in range(self.max_retries + 1):
            try:
                with self.engine.connect() as conn, conn.execution_options(mere_write=True).begin():
                    return fn(conn)
            except (OperationalError, DBAPIError) as e:
                if isinstance(e, IntegrityError) or not _is_transient(e) or attempt == self.max_retries:
                    raise
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 0.5)
        raise AssertionError("unreachable")

    # -- namespaces and tables -------------------------------------------------------------------

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

    def list_namespaces(self) -> list[str]:
        if not self._ensure_schema(create=False):
            return []
        with self.engine.connect() as conn:
            return [r[0] for r in conn.execute(sa.select(namespaces.c.name).order_by(namespaces.c.name))]

    def create_table(self, namespace: str, name: str, location: str, spec: str, table_uuid: str) -> TableRecord:
        self.create_namespace(namespace)

        def run(conn: Connection) -> TableRecord:
            ts = now_micros()
            res = conn.execute(tables.insert().values(
                namespace=namespace, name=name, uuid=table_uuid, location=location, spec=spec, version=0,
                created_at=ts))
            table_id = int(res.inserted_primary_key[0])  # type: ignore[index]
            conn.execute(commits.insert().values(
                table_id=table_id, version=0, committed_at=ts, operation="create", token=uuid.uuid4().hex,
                summary=json.dumps({"added_files": 0, "removed_files": 0, "added_rows": 0})))
            return TableRecord(table_id, namespace, name, table_uuid, location, spec, 0)

        try:
            return self._run(run)
        except IntegrityError as e:
            raise TableExists(f"table {namespace}.{name} already exists") from e

    def load_table(self, namespace: str, name: str) -> TableRecord:
        if not self._ensure_schema(create=False):
            raise NoSuchTable(f"table {namespace}.{name} does not exist (the catalog {self._safe_url()} is empty)")
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(tables).where(
                tables.c.namespace == namespace, tables.c.name == name)).first()
            if row is None:
                known = conn.execute(sa.select(namespaces.c.name).where(namespaces.c.name == namespace)).first()
                if known is None:
                    raise NoSuchTable(f"table {namespace}.{name} does not exist (no namespace {namespace!r})")
                raise NoSuchTable(f"table {namespace}.{name} does not exist")
        return TableRecord(row.id, row.namespace, row.name, row.uuid, row.location, row.spec, int(row.version))

    def list_tables(self, namespace: str | None = None) -> list[str]:
        q = sa.select(tables.c.namespace, tables.c.name).order_by(tables.c.namespace, tables.c.name)
        if namespace is not None:
            q = q.where(tables.c.namespace == namespace)
        if not self._ensure_schema(create=False):
            return []
        with self.engine.connect() as conn:
            return [f"{r[0]}.{r[1]}" for r in conn.execute(q)]

    def drop_table(self, namespace: str, name: str) -> TableRecord:
        if not self._ensure_schema(create=False):
            raise NoSuchTable(f"table {namespace}.{name} does not exist")

        def run(conn: Connection) -> TableRecord:
            row = conn.execute(sa.select(tables).where(
                tables.c.namespace == namespace, tables.c.name == name)).first()
            if row is None:
                raise NoSuchTable(f"table {namespace}.{name} does not exist")
            conn.execute(files.delete().where(files.c.table_id == row.id))
            conn.execute(commits.delete().where(commits.c.table_id == row.id))
            conn.execute(tables.delete().where(tables.c.id == row.id))
            return TableRecord(row.id, row.namespace, row.name, row.uuid, row.location, row.spec, int(row.version))

        return self._run(run)

    # -- reads -----------------------------------------------------------------------------------

    def _table_number(self, table_id: int, column: sa.Column[Any]) -> int:
        with self.engine.connect() as conn:
            v = conn.execute(sa.select(column).where(tables.c.id == table_id)).scalar()
        if v is None:
            raise NoSuchTable(f"table id {table_id} no longer exists")
        return int(v)

    def current_version(self, table_id: int) -> int:
        return self._table_number(table_id, tables.c.version)

    def oldest_version(self, table_id: int) -> int:
        """Versions before this one were expired."""
        return self._table_number(table_id, tables.c.oldest_version)

    def expire(self, table_id: int, keep_from: int) -> list[str]:
        """Forget versions before ``keep_from``: drop the rows of files no kept version needs, return their paths."""

        def run(conn: Connection) -> list[str]:
            q = sa.select(tables.c.version, tables.c.oldest_version).where(tables.c.id == table_id)
            if self.dialect == "postgresql":
                q = q.with_for_update()
            row = conn.execute(q).first()
            if row is None:
                raise NoSuchTable(f"table id {table_id} no longer exists")
            keep = min(keep_from, int(row.version))
            if keep <= int(row.oldest_version):
                return []
            gone = files.c.table_id == table_id, files.c.removed_version <= keep
            paths = [r[0] for r in conn.execute(sa.select(files.c.path).where(*gone))]
            conn.execute(files.delete().where(*gone))
            conn.execute(tables.update().where(tables.c.id == table_id).values(oldest_version=keep))
            return paths

        return self._run(run)

    def version_as_of(self, table_id: int, micros: int) -> int:
        with self.engine.connect() as conn:
            v = conn.execute(sa.select(sa.func.max(commits.c.version)).where(
                commits.c.table_id == table_id, commits.c.committed_at <= micros)).scalar()
        if v is None:
            with self.engine.connect() as conn:
                first = conn.execute(sa.select(sa.func.min(commits.c.committed_at)).where(
                    commits.c.table_id == table_id)).scalar()
            when = micros_to_datetime(micros).isoformat()
            created = "" if first is None else f": it was created at {micros_to_datetime(int(first)).isoformat()}"
            raise NoSuchVersion(f"the table has no version at or before {when}{created}")
        return int(v)

    def files_at(self, table_id: int, version: int) -> list[FileEntry]:
        """The live files of a table at a version, ordered by sequence."""
        q = sa.select(files).where(
            files.c.table_id == table_id,
            files.c.added_version <= version,
            sa.or_(files.c.removed_version.is_(None), files.c.removed_version > version),
        ).order_by(files.c.seq, files.c.id)
        with self.engine.connect() as conn:
            return [self._file(r) for r in conn.execute(q)]

    def all_file_paths(self, table_id: int) -> set[str]:
        with self.engine.connect() as conn:
            return {r[0] for r in conn.execute(sa.select(files.c.path).where(files.c.table_id == table_id))}

    @staticmethod
    def _file(r: Any) -> FileEntry:
        return FileEntry(
            path=r.path, partition=r.partition, bucket=int(r.bucket), row_count=int(r.row_count),
            size_bytes=int(r.size_bytes), content=r.content,
            columns=None if r.columns is None else json.loads(r.columns),
            seq=int(r.seq), id=int(r.id), added_version=int(r.added_version))

    def history(self, table_id: int) -> list[Snapshot]:
        """Every commit, oldest first; those before the oldest readable version are marked expired."""
        q = sa.select(commits).where(commits.c.table_id == table_id).order_by(commits.c.version)
        with self.engine.connect() as conn:
            oldest = conn.execute(sa.select(tables.c.oldest_version).where(tables.c.id == table_id)).scalar()
            if oldest is None:
                raise NoSuchTable(f"table id {table_id} no longer exists")
            return [_snapshot(r, expired=int(r.version) < int(oldest)) for r in conn.execute(q)]

    def has_commit(self, table_id: int, version: int) -> bool:
        with self.engine.connect() as conn:
            return conn.execute(sa.select(commits.c.version).where(
                commits.c.table_id == table_id, commits.c.version == version)).first() is not None

    def find_idempotent(self, table_id: int, key: str) -> Snapshot | None:
        with self.engine.connect() as conn:
            r = conn.execute(sa.select(commits).where(
                commits.c.table_id == table_id, commits.c.idempotency_key == key)).first()
        return None if r is None else _snapshot(r)

    # -- commit ----------------------------------------------------------------------------------

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
    ) -> CommitResult:
        """Atomically add and remove files as a new table version.

        ``validate`` sees what landed after ``base_version`` and raises :class:`CommitConflict` if this
        commit cannot be rebased onto it. Files to remove that are already gone are always a conflict.
        """
        remove_ids = sorted(set(remove))
        token = uuid.uuid4().hex
        summary = dict(summary or {})

        def run(conn: Connection) -> CommitResult:
            q = sa.select(tables.c.version).where(tables.c.id == table_id)
            if self.dialect == "postgresql":
                q = q.with_for_update()
            current = conn.execute(q).scalar()
            if current is None:
                raise NoSuchTable(f"table id {table_id} was dropped before the commit")
            current = int(current)
            if idempotency_key is not None:
                prior = conn.execute(sa.select(commits).where(
                    commits.c.table_id == table_id, commits.c.idempotency_key == idempotency_key)).first()
                if prior is not None:
                    return CommitResult.of(_snapshot(prior), already_committed=True)
            if current < base_version:
                raise CommitConflict(f"table id {table_id} is at version {current}, older than {base_version}")
            if current != base_version and validate is not None:
                validate(self._changes_since(conn, table_id, base_version, current))
            new = current + 1
            if remove_ids:
                done = 0
                for i in range(0, len(remove_ids), 500):
                    chunk = remove_ids[i:i + 500]
                    res = conn.execute(files.update().where(
                        files.c.table_id == table_id, files.c.id.in_(chunk), files.c.removed_version.is_(None),
                    ).values(removed_version=new))
                    done += res.rowcount
                if done != len(remove_ids):
                    raise CommitConflict(
                        f"table id {table_id}: {len(remove_ids) - done} file(s) this commit replaces were already "
                        "removed by a concurrent commit")
            if add:
                conn.execute(files.insert(), [{
                    "table_id": table_id, "path": f.path, "partition": f.partition, "bucket": f.bucket,
                    "seq": f.seq if f.seq is not None else (new << SEQ_SHIFT) | f.order,
                    "added_version": new, "removed_version": None, "row_count": f.row_count,
                    "size_bytes": f.size_bytes, "content": f.content,
                    "columns": None if f.columns is None else json.dumps(f.columns),
                } for f in add])
            ts = now_micros()
            conn.execute(commits.insert().values(
                table_id=table_id, version=new, committed_at=ts, operation=operation, token=token,
                idempotency_key=idempotency_key, summary=json.dumps(summary)))
            res = conn.execute(tables.update().where(tables.c.id == table_id, tables.c.version == current)
                               .values(version=new))
            if res.rowcount != 1:
                raise CommitConflict(f"table id {table_id} moved past version {current} during the commit")
            return CommitResult.of(Snapshot.from_stored(new, ts, operation, summary))

        try:
            return self._run(run)
        except IntegrityError as e:
            if idempotency_key is not None:
                prior = self.find_idempotent(table_id, idempotency_key)
                if prior is not None:
                    return CommitResult.of(prior, already_committed=True)
            raise CatalogError(f"commit to table id {table_id} violated a catalog constraint: {e}") from e
        except OperationalError as e:
            # The connection may have died after the server committed: look for our token.
            try:
                with self.engine.connect() as conn:
                    r = conn.execute(sa.select(commits).where(commits.c.token == token)).first()
            except OperationalError:
                raise CommitStateUnknown(f"commit to table id {table_id} may or may not have landed: {e}") from e
            if r is not None:
                return CommitResult.of(_snapshot(r))
            raise CommitConflict(f"commit to table id {table_id} failed and did not land: {e}") from e

    def _changes_since(self, conn: Connection, table_id: int, base: int, current: int) -> ConcurrentChanges:
        rows = conn.execute(sa.select(commits).where(
            commits.c.table_id == table_id, commits.c.version > base, commits.c.version <= current,
        ).order_by(commits.c.version))
        out = ConcurrentChanges([_snapshot(r) for r in rows])
        removed = conn.execute(sa.select(files.c.id).where(
            files.c.table_id == table_id, files.c.removed_version > base, files.c.removed_version <= current))
        out.removed_file_ids = {int(r[0]) for r in removed}
        return out


def _snapshot(row: Any, expired: bool = False) -> Snapshot:
    return Snapshot.from_stored(int(row.version), int(row.committed_at), row.operation, json.loads(row.summary),
                                expired)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
