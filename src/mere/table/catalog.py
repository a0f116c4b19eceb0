"""The entry point: a warehouse (where files live) plus a catalog (where metadata lives)."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from mere.catalog import SqlCatalog
from mere.errors import InvalidInput, NoSuchNamespace, NoSuchTable, TableExists
from mere.io import Storage
from mere.io.storage import redact
from mere.spec import TableSpec
from mere.table.table import Table

DEFAULT_NAMESPACE = "default"


def split_name(identifier: str) -> tuple[str, str]:
    """'ns.table' -> ('ns', 'table'); a bare name lives in the 'default' namespace."""
    if not isinstance(identifier, str) or not identifier.strip():
        raise InvalidInput(f"table name must be a non-empty string, got {identifier!r}")
    ns, _, name = identifier.rpartition(".")
    ns = ns or DEFAULT_NAMESPACE
    for part in (*ns.split("."), name):
        if not _NAME.fullmatch(part):
            raise InvalidInput(
                f"invalid table name {identifier!r}: use 'namespace.table' with letters, digits, '_' and '-'")
    return ns, name


_NAME = re.compile(r"[^\W_][\w\-]{0,199}")


class Catalog:
    """Tables of one warehouse, with their metadata in a SQL catalog."""

    def __init__(self, warehouse: str, catalog: str | None = None,
                 storage_options: Mapping[str, str] | None = None,
                 filesystem: pafs.FileSystem | None = None) -> None:
        self.storage = Storage(warehouse, storage_options, filesystem)
        self.filesystem_given = filesystem is not None
        if catalog is None:
            if not self.storage.is_local:
                raise InvalidInput(
                    f"warehouse {warehouse!r} is not local: pass catalog='postgresql://...' or 'sqlite:///path'")
            os.makedirs(self.storage.root, exist_ok=True)
            catalog = f"sqlite:///{os.path.join(self.storage.root, 'catalog.db')}"
        elif "://" not in catalog:
            catalog = f"sqlite:///{os.path.abspath(catalog)}"
        self.sql = SqlCatalog(catalog)

    def __repr__(self) -> str:
        return (f"Catalog(warehouse={self.storage.uri!r}, catalog={self.sql!r}, "
                f"storage_options={redact(self.storage.storage_options)})")

    def create_table(
        self,
        name: str,
        schema: pa.Schema,
        primary_key: Sequence[str] | str | None = None,
        partition_by: Sequence[str] | str | None = None,
        buckets: int | None = None,
        merge_operators: Mapping[str, Any] | None = None,
        cdc_column: str | None = None,
        properties: Mapping[str, str] | None = None,
        exist_ok: bool = False,
    ) -> Table:
        ns, short = split_name(name)
        spec = TableSpec.create(schema, primary_key, partition_by, buckets, merge_operators, cdc_column, properties)
        table_uuid = uuid.uuid4().hex
        location = f"{ns}/{short}-{table_uuid[:12]}"
        try:
            record = self.sql.create_table(ns, short, location, spec.to_json(), table_uuid)
        except TableExists:
            if exist_ok:
                return self.table(name)
            raise
        return Table(self, record)

    def table(self, name: str) -> Table:
        ns, short = split_name(name)
        return Table(self, self.sql.load_table(ns, short))

    load_table = table

    def tables(self, namespace: str | None = None) -> list[str]:
        return self.sql.list_tables(namespace)

    def namespaces(self) -> list[str]:
        return self.sql.list_namespaces()

    def drop_table(self, name: str, purge: bool = False) -> None:
        ns, short = split_name(name)
        record = self.sql.drop_table(ns, short)
        if purge:
            for path, _, _ in self.storage.list_files(record.location):
                self.storage.delete(path)

    def exists(self, name: str) -> bool:
        try:
            self.table(name)
        except (NoSuchTable, NoSuchNamespace):
            return False
        return True


def connect(warehouse: str, catalog: str | None = None, storage_options: Mapping[str, str] | None = None,
            filesystem: pafs.FileSystem | None = None) -> Catalog:
    """Open a warehouse. With no ``catalog`` a local warehouse keeps an SQLite catalog file inside it."""
    return Catalog(warehouse, catalog, storage_options, filesystem)
