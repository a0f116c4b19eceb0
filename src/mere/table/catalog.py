"""The entry point: a warehouse (where files live) plus a catalog (where metadata lives)."""

from __future__ import annotations

import logging
import os
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs

from mere.errors import InvalidInput, NoSuchNamespace, NoSuchTable, StorageError, TableExists
from mere.io import Storage
from mere.io.storage import redact
from mere.metadata import NewTable
from mere.options import as_of_micros
from mere.spec import TableSpec, default_properties
from mere.table.catalog_transaction import CatalogSnapshot, CatalogTransaction
from mere.table.context import TableHandle
from mere.table.table import Table

if TYPE_CHECKING:
    from mere.catalog.sql import SqlCatalog

DEFAULT_NAMESPACE = "default"

log = logging.getLogger(__name__)


def split_name(identifier: str) -> tuple[str, str]:
    """'ns.table' -> ('ns', 'table'); a bare name lives in the 'default' namespace."""
    if not isinstance(identifier, str) or not identifier.strip():
        raise InvalidInput(f"table name must be a non-empty string, got {identifier!r}")
    ns, _, name = identifier.rpartition(".")
    ns = ns or DEFAULT_NAMESPACE
    for part in (*ns.split("."), name):
        if not _NAME.fullmatch(part):
            raise InvalidInput(
                f"invalid table name {identifier!r}: use 'namespace.table' with letters, digits, '_' and '-'"
            )
    return ns, name


_NAME = re.compile(r"[^\W_][\w\-]{0,199}")
_DSN_KEYS = frozenset({"host", "hostaddr", "port", "dbname", "user", "password", "sslmode", "service"})


def _looks_like_dsn(text: str) -> bool:
    """Whether a catalog string is libpq's ``key=value ...`` form (a path may hold '=', as in 'day=1/')."""
    pairs = [token.partition("=") for token in text.split()]
    return bool(pairs) and all(eq for _, eq, _ in pairs) and any(k in _DSN_KEYS for k, _, _ in pairs)


class Catalog:
    """Tables of one warehouse, with their metadata in a SQL catalog."""

    def __init__(
        self,
        warehouse: str | os.PathLike[str],
        catalog: str | os.PathLike[str] | None = None,
        storage_options: Mapping[str, str] | None = None,
        filesystem: pafs.FileSystem | None = None,
        threads: int | None = None,
    ) -> None:
        self._open(warehouse, catalog, storage_options, filesystem, threads)
        self.sql  # noqa: B018 - a bad catalog URL fails here, not at the first query

    def _open(
        self,
        warehouse: str | os.PathLike[str],
        catalog: str | os.PathLike[str] | None,
        storage_options: Mapping[str, str] | None,
        filesystem: pafs.FileSystem | None,
        threads: int | None = None,
    ) -> None:
        if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
            raise InvalidInput(f"threads must be a positive integer or None, got {threads!r}")
        self.threads = threads  # merge workers of this catalog's reads (None: $MERE_THREADS or one per core)
        if isinstance(warehouse, os.PathLike):
            warehouse = os.fspath(warehouse)
        if not isinstance(warehouse, str) or not warehouse.strip():
            raise InvalidInput(
                f"warehouse must be a path or URI such as 'wh/' or 's3://bucket/wh', got {warehouse!r}"
            )
        if isinstance(catalog, os.PathLike):
            catalog = os.fspath(catalog)
        if catalog is not None and (not isinstance(catalog, str) or not catalog.strip()):
            raise InvalidInput(
                f"catalog must be a database URL such as 'postgresql://user@host/db' or "
                f"'sqlite:///path', or a file path, got {catalog!r}"
            )
        if storage_options is not None and (
            not isinstance(storage_options, Mapping)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in storage_options.items())
        ):
            if not isinstance(storage_options, Mapping):
                raise InvalidInput(
                    f"storage_options must be a dict of strings, got {type(storage_options).__name__}"
                )
            odd = [
                f"{k!r} ({type(v).__name__})" for k, v in storage_options.items() if not isinstance(v, str)
            ]
            odd += [f"key {k!r}" for k in storage_options if not isinstance(k, str)]
            # Names and types only: values may be secrets.
            raise InvalidInput(f"storage_options must be a dict of strings; not a string: {', '.join(odd)}")
        if filesystem is not None and not isinstance(filesystem, pafs.FileSystem):
            raise InvalidInput(f"filesystem must be a pyarrow.fs.FileSystem, got {type(filesystem).__name__}")
        if filesystem is None and "://" not in warehouse:
            # A relative path means this process's directory: engine workers (Spark, Dask, Ray, DataLoader
            # processes) run elsewhere and must open the same warehouse.
            warehouse = os.path.abspath(warehouse)
            if os.path.isfile(warehouse):
                raise InvalidInput(f"warehouse {warehouse!r} is a file, not a folder")
        if isinstance(catalog, str) and "://" not in catalog:  # a file path: an SQLite catalog file
            if _looks_like_dsn(catalog):  # never echoed: it may hold a password
                raise InvalidInput(
                    "catalog looks like a libpq 'key=value' connection string; mere takes a URL such as "
                    "postgresql://user@host:5432/dbname (password after 'user:'), sqlite:///path or a file path"
                )
            catalog = f"sqlite:///{os.path.abspath(catalog)}"
        if (
            isinstance(catalog, str)
            and catalog.startswith("sqlite:///")
            and not catalog.startswith("sqlite:////")
        ):
            path = catalog[len("sqlite:///") :]
            if path and not path.startswith(":memory:") and not os.path.isabs(path):
                catalog = f"sqlite:///{os.path.abspath(path)}"
        self._args = (warehouse, catalog, dict(storage_options or {}), threads, filesystem)
        self.storage = Storage(warehouse, storage_options, filesystem)
        self.filesystem_given = filesystem is not None
        if catalog is None:
            if not self.storage.is_local:
                raise InvalidInput(
                    f"warehouse {warehouse!r} is not local: pass catalog='postgresql://...' or 'sqlite:///path'"
                )
            # Nothing is created here: the first create_table makes the warehouse folder and the catalog file.
            catalog = f"sqlite:///{os.path.join(self.storage.root, 'catalog.db')}"
        self.catalog_url = catalog
        self._sql: SqlCatalog | None = None

    @property
    def sql(self) -> SqlCatalog:
        """The SQL catalog, connected (and SQLAlchemy imported) on first use."""
        if self._sql is None:
            from mere.catalog.sql import SqlCatalog

            self._sql = SqlCatalog(self.catalog_url)
        return self._sql

    def __reduce__(self) -> tuple[Any, ...]:
        if self.filesystem_given:
            raise InvalidInput(
                "a catalog opened with filesystem= cannot be pickled: open it with a warehouse URI"
            )
        return (_reopen, self._args[:4])

    def __repr__(self) -> str:
        return (
            f"Catalog(warehouse={self.storage.uri!r}, catalog={self.sql!r}, "
            f"storage_options={redact(self.storage.storage_options)})"
        )

    def create_table(
        self,
        name: str,
        schema: pa.Schema,
        primary_key: Sequence[str] | str | None = None,
        partition_by: Sequence[str] | str | None = None,
        buckets: int | None = None,
        merge_operators: Mapping[str, Any] | str | None = None,
        cdc_column: str | None = None,
        properties: Mapping[str, str] | None = None,
        exist_ok: bool = False,
        sequence_by: Sequence[str] | str | None = None,
        sequence_groups: Mapping[str, Sequence[str]] | None = None,
        key_scope: str | None = None,
    ) -> Table:
        """Create a table; with ``exist_ok`` an existing table of the same name and spec is returned instead.

        A new table gets mere's default properties for what ``properties`` leaves out: automatic
        compaction (``compaction.auto=inline`` on keyed tables) and automatic expiry of old versions
        (``retention.max-age=7d``, keeping at least ``retention.min-versions=10``); see
        :data:`~mere.spec.NEW_TABLE_PROPERTIES`. Give ``"off"`` to turn either off.

        ``sequence_by`` (a value column or a list of them, of integer, decimal, timestamp, date or string
        type) orders the versions of each key: the version with the highest sequence wins, whatever the
        order of commits and of rows inside a batch (equal sequences: commit order, then row order); see
        :meth:`Table.set_sequence_by <mere.Table.set_sequence_by>` and docs/concepts.md, "Sequence
        ordering". It refuses ``sum`` and ``concat`` (a replayed event would count twice), and
        ``last_non_null`` outside a sequence group of its own.

        ``merge_operators`` maps columns to ``last`` (the default), ``last_non_null``, ``sum``,
        ``concat``, ``max``, ``min``, ``bool_and`` or ``bool_or``; or it is the string ``"first_row"``:
        each key's first version wins and later ones are ignored (deletes are refused). See
        docs/concepts.md, "Merge operators".

        ``key_scope`` says what a primary key identifies on a partitioned table: ``"table"`` (one row per
        key in the whole table: a row whose partition values change moves its key, removing it from its
        old partition) or ``"partition"`` (one row per key and partition). The default is ``"table"``,
        except where a partition column is outside the key and versions do not merge newest-wins; see
        docs/concepts.md, "Table-wide keys".

        Args:
            name: ``namespace.table``, or a bare name in the ``default`` namespace (letters, digits, ``_``
                and ``-``).
            schema: The table's Arrow schema.
            primary_key: The key column(s); None for a table without key (written with ``append``).
            partition_by: Column(s) whose values split the table into partitions.
            buckets: Buckets per partition (each key lives in one); None for the default.
            merge_operators: ``{column: operator}`` for columns that fold rather than replace on upsert
                (such as ``sum`` or ``max``), or ``"first_row"``.
            cdc_column: The column of change rows that says insert, update or delete.
            properties: Table properties (see ``mere.spec.PROPERTIES``); mere's defaults fill in the rest.
            exist_ok: Return an existing table of the same name and spec instead of raising.
            sequence_by: Value column(s) ordering each key's versions (highest wins); None: commit order.
            sequence_groups: ``{group sequence column: [columns]}`` (needs ``sequence_by``): partial rows
                carry whole groups, and each group's columns come from the version carrying it with the
                highest group sequence (docs/concepts.md, "Sequence groups").
            key_scope: ``"table"`` or ``"partition"``: whether a key names one row of the table or one row
                per partition; None for the default.

        Returns:
            The new table (or, with ``exist_ok``, the existing one).

        Raises:
            TableExists: The table exists and ``exist_ok`` is False, or it exists with a different schema,
                key, partitioning, buckets, merge operators, change column, sequence (or, when given,
                properties);
                the message names the differences.
            InvalidInput: An invalid name, schema, key, partitioning or property, or a ``sequence_by``
                column that is a key or partition column, or with ``sum``/``concat``, an unknown merge
                operator or engine, an operator on a column of a type it cannot take, or sequence groups
                naming key, partition or ``sequence_by`` columns or a column twice; a ``key_scope`` other
                than "table" or "partition", given for a table without key, or "table" where keys could
                move and versions do not merge newest-wins (an operator other than ``last``, a merge
                engine or sequence groups).
            SchemaMismatch: A ``sequence_by`` column the schema lacks.
            UnsupportedType: A column type mere cannot store, key, partition or sequence by.
            CatalogError: The catalog could not be reached or written.
        """
        ns, short = split_name(name)
        if not isinstance(exist_ok, bool):
            raise InvalidInput(f"exist_ok must be True or False, got {exist_ok!r}")
        new, given = self.new_table(
            name,
            schema=schema,
            primary_key=primary_key,
            partition_by=partition_by,
            buckets=buckets,
            merge_operators=merge_operators,
            cdc_column=cdc_column,
            properties=properties,
            sequence_by=sequence_by,
            sequence_groups=sequence_groups,
            key_scope=key_scope,
        )
        spec = TableSpec.from_json(new.spec, f"{ns}.{short}")
        try:
            record = self.sql.create_table(ns, short, new.location, new.spec, new.uuid)
        except TableExists:
            if not exist_ok:
                raise
            existing = self.table(name)
            differences = existing.spec.differences(spec, properties=properties is not None)
            if differences and not existing.spec.differences(given, properties=properties is not None):
                differences = []  # a table created before these defaults, with exactly the properties given
            if key_scope is None:  # a table created before key_scope keeps its meaning
                differences = [d for d in differences if not d.startswith("key_scope ")]
            if differences:
                raise TableExists(
                    f"table {ns}.{short} already exists with a different spec: " + "; ".join(differences)
                ) from None
            return existing
        return Table(self, record)

    def new_table(
        self,
        name: str,
        *,
        schema: pa.Schema,
        primary_key: Sequence[str] | str | None = None,
        partition_by: Sequence[str] | str | None = None,
        buckets: int | None = None,
        merge_operators: Mapping[str, Any] | str | None = None,
        cdc_column: str | None = None,
        properties: Mapping[str, str] | None = None,
        sequence_by: Sequence[str] | str | None = None,
        sequence_groups: Mapping[str, Sequence[str]] | None = None,
        key_scope: str | None = None,
    ) -> tuple[NewTable, TableSpec]:
        """A table to create, checked but not created: its catalog row, and the layout as given.

        The row's layout has mere's default properties filled in; :meth:`create_table` and catalog
        transactions create it.

        Args:
            name: ``namespace.table``, or a bare name in the ``default`` namespace.
            schema: The table's Arrow schema.
            primary_key: The key column(s).
            partition_by: The partition column(s).
            buckets: Buckets per partition.
            merge_operators: ``{column: operator}``, or a merge engine (``"first_row"``).
            cdc_column: The change column.
            properties: Table properties.
            sequence_by: The sequence column(s).
            sequence_groups: ``{group sequence column: [columns]}``.
            key_scope: ``"table"`` or ``"partition"`` (None: the default).

        Returns:
            The new table's row and the layout as given.

        Raises:
            InvalidInput: An invalid name, schema, key, partitioning or property (as :meth:`create_table`).
        """
        ns, short = split_name(name)
        given = TableSpec.create(
            schema,
            primary_key,
            partition_by,
            buckets,
            merge_operators,
            cdc_column,
            properties,
            sequence_by,
            sequence_groups,
            key_scope,
        )
        defaults = default_properties(given.has_primary_key)
        spec = replace(given, properties={**defaults, **given.properties})
        table_uuid = uuid.uuid4().hex
        location = f"{ns}/{short}-{table_uuid[:12]}"
        return NewTable(ns, short, location, spec.to_json(), table_uuid), given

    def table_name(self, name: str) -> str:
        """``namespace.table`` of a table name (a bare name lives in the ``default`` namespace).

        Args:
            name: The name.

        Returns:
            The qualified name.

        Raises:
            InvalidInput: Not a valid table name.
        """
        ns, short = split_name(name)
        return f"{ns}.{short}"

    def transaction(self, idempotency_key: str | None = None) -> CatalogTransaction:
        """Start changes to several tables that commit together: one version per changed table, or none.

        See docs/concepts.md, "Catalog transactions".

        ::

            with cat.transaction(idempotency_key="batch-42") as tx:
                tx.table("sales.orders").upsert(orders)
                tx.table("sales.lines").upsert(lines)

        Args:
            idempotency_key: A key that makes the transaction commit once: when a catalog transaction with
                it has landed, every table's change does nothing and ``commit()`` returns that
                transaction's results (``already_committed=True``).

        Returns:
            The open :class:`~mere.table.catalog_transaction.CatalogTransaction`.

        Raises:
            InvalidInput: An ``idempotency_key`` that is not a non-empty string.
            CatalogError: The catalog could not be read (a key is looked up now).
        """
        return CatalogTransaction(self, idempotency_key)

    def snapshot(self, as_of: Any = None) -> CatalogSnapshot:
        """One read point for every table: each table's version, read in one database read.

        ``snap.table("sales.orders").scan()`` and ``snap.table("sales.lines").scan()`` see exactly the
        commits landed before the read point, a catalog transaction's whole or not at all. The engine
        adapters take it as ``snapshot=``.

        Args:
            as_of: A point in time (a datetime, an ISO 8601 string or epoch seconds; a time without a zone
                is read as UTC, not as local time): each table's newest version committed at or before it.
                None: now.

        Returns:
            The :class:`~mere.table.catalog_transaction.CatalogSnapshot`.

        Raises:
            InvalidInput: An ``as_of`` that is not a time.
            CatalogError: The catalog could not be read.
        """
        micros = None if as_of is None else as_of_micros(as_of)
        return CatalogSnapshot(self, self.sql.table_versions(micros), as_of)

    def table(self, name: str) -> Table:
        """Open the table ``namespace.name`` (or ``name`` in the default namespace).

        Args:
            name: ``namespace.table``, or a bare name in the ``default`` namespace.

        Returns:
            A handle on the table (cheap: every read asks the catalog for the version to read).

        Raises:
            NoSuchTable: There is no such table.
            InvalidInput: ``name`` is not a valid table name.
            CatalogError: The catalog could not be read.
        """
        ns, short = split_name(name)
        return Table(self, self.sql.load_table(ns, short))

    load_table = table

    def tables(self, namespace: str | None = None) -> list[str]:
        """Names of the tables, all or those of one namespace, sorted."""
        if namespace is not None and (
            not isinstance(namespace, str) or not all(_NAME.fullmatch(p) for p in namespace.split("."))
        ):
            raise InvalidInput(
                f"namespace must be a name of letters, digits, '_' and '-' (dotted for nested ones), "
                f"got {namespace!r}"
            )
        return self.sql.list_tables(namespace)

    @property
    def initialized(self) -> bool:
        """Whether the catalog holds mere's tables.

        False where nothing was ever created in it (a new warehouse, or a mistyped one). Asking creates
        nothing."""
        return self.sql.format_version() is not None

    def namespaces(self) -> list[str]:
        """Names of the namespaces, sorted."""
        return self.sql.list_namespaces()

    def drop_table(self, name: str, purge: bool = False) -> None:
        """Remove a table from the catalog; with ``purge`` also delete its files and folders.

        Args:
            name: ``namespace.table``, or a bare name in the ``default`` namespace.
            purge: Also delete the table's files and folders from storage (for good). Only files mere
                wrote go: a file someone else put under the table's location stays, with its folders
                (a warning on the ``mere`` logger names them).

        Raises:
            NoSuchTable: There is no such table.
            InvalidInput: ``name`` is not a valid table name, or ``purge`` is not a bool.
            CatalogError: The catalog could not be written.
            StorageError: ``purge`` could not delete the files.
        """
        ns, short = split_name(name)
        if not isinstance(purge, bool):
            raise InvalidInput(f"purge must be True or False, got {purge!r}")
        try:
            record = self.sql.drop_table(ns, short, purge=purge)
        except NoSuchTable:
            pending = self.sql.pending_purges(ns, short) if purge else []
            if not pending:
                raise
            for uuid, location in pending:  # a purge that failed or was killed: its files go now
                self._purge(name, location, uuid)
            return
        assert record is not None  # dropped unconditionally
        if purge:
            self._purge(name, record.location, record.uuid)

    def _purge(self, name: str, location: str, uuid: str) -> None:
        try:
            left = self.storage.delete_tree(location)
        except StorageError as e:
            raise StorageError(
                f"{name}: the table is dropped, but deleting its files under {location!r} failed ({e}); "
                f"drop_table({name!r}, purge=True) again deletes them"
            ) from e
        self.sql.purged(uuid)
        if left:
            log.warning(
                "%s: purge left %d files mere did not write: %s", name, len(left), ", ".join(left[:5])
            )

    def drop_if_unchanged(self, table: TableHandle, version: int) -> bool:
        """Drop ``table`` (and its files) if it is still at ``version`` (checked atomically in the catalog).

        This undoes a table a failed write created (the Spark sink calls it when a job that created its table
        aborts). Returns whether it was dropped; a table some commit changed since stays, rows and all."""
        if not isinstance(version, int) or isinstance(version, bool):
            raise InvalidInput(f"drop_if_unchanged: version must be an int, got {version!r}")
        ns, short = split_name(table.name)
        record = self.sql.drop_table(ns, short, expect=(table.context.uuid, version), purge=True)
        if record is None:
            return False
        self._purge(table.name, record.location, record.uuid)
        return True

    def upgrade(self) -> list[str]:
        """Migrate the catalog's tables to this mere's format now (connecting does it too); returns the steps.

        A catalog written by a newer mere is refused with :class:`~mere.errors.CatalogError`, unchanged.
        """
        return self.sql.upgrade()

    def exists(self, name: str) -> bool:
        """Whether the table exists (asks the catalog; creates nothing)."""
        try:
            self.table(name)
        except (NoSuchTable, NoSuchNamespace):
            return False
        return True


def _reopen(
    warehouse: str, catalog: str | None, storage_options: Mapping[str, str], threads: int | None = None
) -> Catalog:
    """A catalog unpickled in a worker: it connects only if the worker asks the catalog something."""
    out = Catalog.__new__(Catalog)
    out._open(warehouse, catalog, storage_options, None, threads)
    return out


def connect(
    warehouse: str | os.PathLike[str],
    catalog: str | os.PathLike[str] | None = None,
    storage_options: Mapping[str, str] | None = None,
    filesystem: pafs.FileSystem | None = None,
    threads: int | None = None,
) -> Catalog:
    """Open a warehouse: where the tables' files live, plus the SQL catalog that holds their metadata.

    Opening creates nothing: the warehouse folder and the catalog file appear with the first table.

    Args:
        warehouse: A local path or a URI such as ``s3://bucket/wh``. A relative path is made absolute (engine
            workers open the same warehouse).
        catalog: A database URL (``postgresql://user@host/db``, ``sqlite:///path``) or an SQLite file path.
            None: a local warehouse keeps an SQLite catalog file inside it (a remote one needs a URL).
        storage_options: Options of the storage (strings, such as S3 endpoint and credentials).
        filesystem: A ``pyarrow.fs.FileSystem`` to reach the warehouse through (such a catalog cannot be
            pickled to engine workers).
        threads: How many workers merge this catalog's reads (default: ``$MERE_THREADS``, else one per
            core).

    Returns:
        The catalog.

    Raises:
        InvalidInput: An argument of the wrong kind, a warehouse path that is a file, a ``catalog`` that is
            not an SQLite or PostgreSQL URL (or is a libpq ``key=value`` string), or a remote warehouse
            without ``catalog``.
        NotInstalled: A PostgreSQL catalog without psycopg installed.
    """
    return Catalog(warehouse, catalog, storage_options, filesystem, threads)
