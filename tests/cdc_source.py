"""A real change stream for CDC tests: PostgreSQL logical decoding as the source and the oracle.

``ChangeSource`` runs a PostgreSQL with ``wal_level=logical``, a ``test_decoding`` replication slot and a
few primary-key tables (declared with ``TableSpec``). ``run_workload`` writes random transactions to it,
``ChangeSource.changes()`` reads the slot back as typed ``Event`` objects, and ``ChangeSource.expected()``
is what the tables hold: applying the events in ``seq`` order (``apply_in_sequence``) must give exactly
that. ``deliver`` scrambles a stream the way at-least-once pipelines do (shuffled across batches,
duplicated, replayed) and ``to_arrow_events`` lands events as a Debezium-like Arrow table.

test_decoding's text format (PostgreSQL 15, ``contrib/test_decoding``), as parsed here::

    table public.t: INSERT: id[integer]:1 note[text]:'it''s' n[numeric]:1.500 b[boolean]:true x[bytea]:null
    table public.t: UPDATE: old-key: <old columns> new-tuple: <new columns>
    table public.t: DELETE: <old columns>

Values are the type's output function under the decoding session's settings; everything except
integers, floats, numeric and booleans is single-quoted with ``'`` doubled (backslashes are not escaped).
Old images omit NULL columns; new images write ``unchanged-toast-datum`` for a TOASTed value the update
did not change (filled in here from the old image, which ``REPLICA IDENTITY FULL`` carries whole).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import random
import re
import struct
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from types import TracebackType
from typing import Any, Literal

import psycopg
import pyarrow as pa
from psycopg import sql

from services import PostgresServer

__all__ = [
    "DEFAULT_TABLES",
    "LOGICAL_SETTINGS",
    "ChangeSource",
    "Column",
    "Event",
    "TableSpec",
    "WorkloadLog",
    "apply_in_order",
    "apply_in_sequence",
    "arrow_schema",
    "deliver",
    "diff_models",
    "diff_rows",
    "in_sequence",
    "parse_change",
    "parse_lsn",
    "random_value",
    "run_workload",
    "to_arrow_events",
]

# Server settings for logical decoding. synchronous_commit=on overrides PostgresServer's "off": the slot
# functions decode only WAL that is already flushed, so with asynchronous commit the newest transactions
# are silently missing from a read that follows them.
LOGICAL_SETTINGS = {"wal_level": "logical", "max_replication_slots": "32", "synchronous_commit": "on"}

# Session settings under which the decoding session renders values: they fix the text test_decoding
# produces (offsets always +00, ISO dates, shortest exact floats, hex bytea).
_READER_SETTINGS = {
    "TimeZone": "UTC",
    "DateStyle": "ISO, YMD",
    "extra_float_digits": "1",
    "bytea_output": "hex",
}

POSITION_BITS = 20  # seq = commit_lsn << POSITION_BITS | position of the change in its transaction

Op = Literal["insert", "update", "delete"]
Key = tuple[Any, ...]
Row = dict[str, Any]


# -- schema ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _PgType:
    decoded: str  # the type's name in test_decoding's output (format_type without typmod)
    parse: Callable[[str], Any]


def _parse_bool(text: str) -> bool:
    if text not in ("true", "false"):
        raise ValueError(f"not a test_decoding boolean: {text!r}")
    return text == "true"


def _parse_timestamptz(text: str) -> datetime:
    # The decoding session runs with TimeZone=UTC, so every value ends in "+00"; BC years and
    # +-infinity have no Python counterpart and are refused rather than guessed.
    if not text.endswith("+00") or text.endswith(" BC") or not text[:1].isdigit():
        raise ValueError(f"timestamptz outside what the harness handles: {text!r}")
    value = datetime.fromisoformat(text)
    return value.astimezone(UTC)


def _parse_date(text: str) -> date:
    if not text[:1].isdigit() or text.endswith(" BC"):
        raise ValueError(f"date outside what the harness handles: {text!r}")
    return date.fromisoformat(text)


def _parse_bytea(text: str) -> bytes:
    if not text.startswith("\\x"):
        raise ValueError(f"bytea not in hex form: {text!r}")
    return bytes.fromhex(text[2:])


def _parse_int(text: str) -> int:
    if not re.fullmatch(r"-?\d+", text):
        raise ValueError(f"not an integer: {text!r}")
    return int(text)


_TYPES: dict[str, _PgType] = {
    "integer": _PgType("integer", _parse_int),
    "bigint": _PgType("bigint", _parse_int),
    "numeric": _PgType("numeric", Decimal),
    "double precision": _PgType("double precision", float),
    "text": _PgType("text", str),
    "boolean": _PgType("boolean", _parse_bool),
    "date": _PgType("date", _parse_date),
    "timestamp with time zone": _PgType("timestamp with time zone", _parse_timestamptz),
    "bytea": _PgType("bytea", _parse_bytea),
}
_ALIASES = {
    "int": "integer",
    "int4": "integer",
    "int8": "bigint",
    "float8": "double precision",
    "bool": "boolean",
    "timestamptz": "timestamp with time zone",
}


def _base_type(pg_type: str) -> str:
    """``numeric(12,3)`` -> ``numeric``; aliases to PostgreSQL's canonical names."""
    base = re.sub(r"\s*\(.*\)\s*$", "", pg_type.strip().lower())
    base = _ALIASES.get(base, base)
    if base not in _TYPES:
        raise ValueError(f"unsupported column type {pg_type!r}; supported: {sorted(_TYPES)}")
    return base


def _precision_scale(pg_type: str) -> tuple[int, int]:
    """``numeric(12,3)`` -> (12, 3); ``numeric(5)`` -> (5, 0). Unconstrained numeric has no Arrow twin."""
    match = re.search(r"\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)\s*$", pg_type)
    if not match:
        raise ValueError(f"{pg_type!r}: declare numeric with precision and scale")
    return int(match.group(1)), int(match.group(2) or 0)


@dataclass(frozen=True)
class Column:
    """A column: name, PostgreSQL type as written in DDL (e.g. ``numeric(12,3)``), nullability."""

    name: str
    pg_type: str
    nullable: bool = True

    @property
    def base_type(self) -> str:
        return _base_type(self.pg_type)

    @property
    def arrow_type(self) -> pa.DataType:
        base = self.base_type
        if base == "numeric":
            return pa.decimal128(*_precision_scale(self.pg_type))
        return {
            "integer": pa.int32(),
            "bigint": pa.int64(),
            "double precision": pa.float64(),
            "text": pa.string(),
            "boolean": pa.bool_(),
            "date": pa.date32(),
            "timestamp with time zone": pa.timestamp("us", tz="UTC"),
            "bytea": pa.binary(),
        }[base]


@dataclass(frozen=True)
class TableSpec:
    """A primary-key table: columns, key column names, and an optional partition-like column."""

    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    partition: str | None = None

    def __post_init__(self) -> None:
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: duplicate column names")
        for name in (*self.key, *([self.partition] if self.partition else [])):
            if name not in names:
                raise ValueError(f"{self.name}: {name!r} is not a column")
        for c in self.columns:
            c.arrow_type  # noqa: B018 - validates the type (and numeric's precision) early
            if c.name in self.key and c.nullable:
                raise ValueError(f"{self.name}.{c.name}: key columns must be NOT NULL")
        if {"op", "lsn"} & set(names):
            raise ValueError(f"{self.name}: 'op' and 'lsn' are reserved for the Arrow CDC shape")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)

    def key_of(self, row: Mapping[str, Any]) -> Key:
        return tuple(row[k] for k in self.key)

    def ddl(self) -> sql.Composed:
        cols = [
            sql.SQL("{} {}{}").format(
                sql.Identifier(c.name), sql.SQL(c.pg_type), sql.SQL("" if c.nullable else " NOT NULL")
            )
            for c in self.columns
        ]
        pk = sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(map(sql.Identifier, self.key)))
        return sql.SQL("CREATE TABLE {} ({})").format(
            sql.Identifier(self.name), sql.SQL(", ").join([*cols, pk])
        )


ORDERS = TableSpec(
    "orders",
    (
        Column("id", "integer", nullable=False),
        Column("day", "date", nullable=False),
        Column("qty", "integer"),
        Column("big", "bigint"),
        Column("amount", "numeric(12,3)"),
        Column("score", "double precision"),
        Column("note", "text"),
        Column("flag", "boolean"),
        Column("at", "timestamp with time zone"),
        Column("blob", "bytea"),
    ),
    key=("id",),
    partition="day",
)
LEDGER = TableSpec(  # composite key with a text part: quoting hazards in keys too
    "ledger",
    (
        Column("account", "text", nullable=False),
        Column("n", "bigint", nullable=False),
        Column("region", "text", nullable=False),
        Column("memo", "text"),
        Column("total", "numeric(12,3)"),
        Column("ok", "boolean"),
        Column("booked", "date"),
        Column("ts", "timestamp with time zone"),
        Column("raw", "bytea"),
    ),
    key=("account", "n"),
    partition="region",
)
DEFAULT_TABLES = (ORDERS, LEDGER)
# A table whose large ``body`` is stored out of line (TOAST) in the unchanged-TOAST tests of the CDC sync.
DOCS = TableSpec(
    "docs",
    (Column("id", "integer", False), Column("n", "integer"), Column("body", "text"), Column("tag", "text")),
    key=("id",),
)
DOCS_TYPES = {c.name: c.pg_type for c in DOCS.columns}


# -- events ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One row change. ``before``: the old row (update/delete); ``after``: the new row (insert/update).

    ``lsn`` is the change's own WAL position, ``commit_lsn`` its transaction's commit position, and
    ``seq`` = ``commit_lsn << POSITION_BITS | position in the transaction``: commit order, then statement
    order, unique per change. ``key`` names the table's primary-key columns.
    """

    table: str
    op: Op
    before: Row | None
    after: Row | None
    lsn: int
    commit_lsn: int
    xid: int
    seq: int
    key: tuple[str, ...] = ()

    @property
    def before_key(self) -> Key | None:
        return None if self.before is None else tuple(self.before[k] for k in self.key)

    @property
    def after_key(self) -> Key | None:
        return None if self.after is None else tuple(self.after[k] for k in self.key)

    @property
    def key_changed(self) -> bool:
        return self.op == "update" and self.before_key != self.after_key


def parse_lsn(text: str) -> int:
    """``'16/B374D848'`` -> the LSN as one integer."""
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


class _Cursor:
    """A position in one line of test_decoding output."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def startswith(self, literal: str) -> bool:
        return self.text.startswith(literal, self.pos)

    def expect(self, literal: str) -> None:
        if not self.startswith(literal):
            raise ValueError(f"expected {literal!r} at {self.pos} in {self.text!r}")
        self.pos += len(literal)

    def identifier(self, stop: str) -> str:
        """A name as quote_identifier writes it: bare up to ``stop``, or ``"..."`` with ``""`` inside."""
        if self.startswith('"'):
            end = self.pos + 1
            while True:
                end = self.text.index('"', end)
                if self.text.startswith('""', end):
                    end += 2
                    continue
                name = self.text[self.pos + 1 : end].replace('""', '"')
                self.pos = end + 1
                return name
        end = self.text.index(stop, self.pos)
        name = self.text[self.pos : end]
        self.pos = end
        return name

    def value(self) -> str | None:
        """A quoted literal (``'`` doubled inside), or a bare token up to the next space."""
        if self.startswith("'"):
            chunks = []
            start = self.pos + 1
            while True:
                end = self.text.index("'", start)
                chunks.append(self.text[start:end])
                if self.text.startswith("''", end):
                    chunks.append("'")
                    start = end + 2
                    continue
                self.pos = end + 1
                return "".join(chunks)
        end = self.text.find(" ", self.pos)
        end = len(self.text) if end < 0 else end
        token = self.text[self.pos : end]
        self.pos = end
        return None if token == "null" else token


_UNCHANGED_TOAST = object()  # the marker for a TOASTed value an update left as it was


def _parse_tuple(cur: _Cursor, stop: str | None) -> dict[str, tuple[str, Any]]:
    """``name[type]:value ...`` up to ``stop`` (or the end) -> {name: (type, value)}."""
    out: dict[str, tuple[str, Any]] = {}
    if cur.startswith("(no-tuple-data)"):
        cur.expect("(no-tuple-data)")
        return out
    while not cur.at_end() and not (stop is not None and cur.startswith(stop)):
        name = cur.identifier("[")
        cur.expect("[")
        # type names may contain brackets themselves (integer[]): the type ends at the first "]:".
        end = cur.text.index("]:", cur.pos)
        type_name = cur.text[cur.pos : end]
        cur.pos = end + 2
        quoted = cur.startswith("'")
        raw = cur.value()
        if name in out:
            raise ValueError(f"column {name!r} twice in {cur.text!r}")
        if raw is None:
            out[name] = (type_name, None)
        elif not quoted and raw == "unchanged-toast-datum":
            out[name] = (type_name, _UNCHANGED_TOAST)
        else:
            out[name] = (type_name, raw)
        if not cur.at_end():
            cur.expect(" ")
    return out


def _typed(spec: TableSpec, raw: dict[str, tuple[str, Any]], *, image: str) -> Row:
    """Raw strings -> Python values of the declared column types, in the table's column order.

    Old images leave NULL columns out, so a missing column is NULL there; a new image must be complete.
    """
    unknown = set(raw) - set(spec.names)
    if unknown:
        raise ValueError(f"{spec.name}: columns {sorted(unknown)} are not in the declared schema")
    row: Row = {}
    for col in spec.columns:
        if col.name not in raw:
            if image == "new":
                raise ValueError(f"{spec.name}: new image lacks column {col.name!r}")
            row[col.name] = None
            continue
        type_name, text = raw[col.name]
        expected = _TYPES[col.base_type].decoded
        if type_name != expected:
            raise ValueError(f"{spec.name}.{col.name}: decoded type {type_name!r}, declared {expected!r}")
        if text is _UNCHANGED_TOAST and image == "old":
            raise ValueError(f"{spec.name}.{col.name}: unchanged TOAST marker in an old image")
        if text is None or text is _UNCHANGED_TOAST:
            row[col.name] = text
        else:
            row[col.name] = _TYPES[col.base_type].parse(text)
    return row


def parse_change(
    data: str, tables: Mapping[str, TableSpec], *, keep_unchanged: bool = False
) -> tuple[str, Op, Row | None, Row | None]:
    """One test_decoding change line -> (table, op, before, after) with typed values.

    An unchanged TOASTed value of an update is taken from the old image; with ``keep_unchanged`` it is
    left out of the new image (as wal2json leaves it out without ``REPLICA IDENTITY FULL``)."""
    cur = _Cursor(data)
    cur.expect("table ")
    schema = cur.identifier(".")
    cur.expect(".")
    name = cur.identifier(":")
    cur.expect(": ")
    if schema != "public" or name not in tables:
        raise ValueError(f"change for an undeclared table {schema}.{name}: {data!r}")
    spec = tables[name]
    verb = cur.identifier(":")
    cur.expect(": ")
    before: Row | None = None
    after: Row | None = None
    if verb == "INSERT":
        after = _typed(spec, _parse_tuple(cur, None), image="new")
        op: Op = "insert"
    elif verb == "UPDATE":
        if cur.startswith("old-key: "):
            cur.expect("old-key: ")
            before = _typed(spec, _parse_tuple(cur, "new-tuple: "), image="old")
            cur.expect("new-tuple: ")
        after = _typed(spec, _parse_tuple(cur, None), image="new")
        for col, value in list(after.items()):
            if value is _UNCHANGED_TOAST:
                if keep_unchanged:
                    del after[col]  # the new image lacks it, as wal2json's does
                    continue
                if before is None:
                    raise ValueError(f"{name}.{col}: unchanged TOAST value without an old image: {data!r}")
                after[col] = before[col]
        op = "update"
    elif verb == "DELETE":
        old = _parse_tuple(cur, None)
        if not old:
            raise ValueError(f"DELETE without an old image (REPLICA IDENTITY not FULL?): {data!r}")
        before = _typed(spec, old, image="old")
        op = "delete"
    else:
        raise ValueError(f"unsupported change {verb!r}: {data!r}")
    if not cur.at_end():
        raise ValueError(f"trailing text at {cur.pos}: {data!r}")
    return name, op, before, after


def _events_from_rows(
    rows: Iterable[tuple[int, int, str]], tables: Mapping[str, TableSpec], *, keep_unchanged: bool = False
) -> list[Event]:
    """(lsn, xid, data) rows of pg_logical_slot_*_changes -> events, stamped at each COMMIT."""
    events: list[Event] = []
    pending: list[tuple[int, int, str, Op, Row | None, Row | None]] | None = None
    for lsn, xid, data in rows:
        if data == "BEGIN" or data.startswith("BEGIN "):
            if pending is not None:
                raise ValueError(f"BEGIN inside an open transaction at {lsn}")
            pending = []
        elif data == "COMMIT" or data.startswith("COMMIT "):
            if pending is None:
                raise ValueError(f"COMMIT without BEGIN at {lsn}")
            if len(pending) >= 1 << POSITION_BITS:
                raise ValueError("transaction too large for the seq packing")
            for position, (change_lsn, change_xid, table, op, before, after) in enumerate(pending):
                events.append(
                    Event(
                        table=table,
                        op=op,
                        before=before,
                        after=after,
                        lsn=change_lsn,
                        commit_lsn=lsn,
                        xid=change_xid,
                        seq=(lsn << POSITION_BITS) | position,
                        key=tables[table].key,
                    )
                )
            pending = None
        else:
            if pending is None:
                raise ValueError(f"change outside a transaction at {lsn}: {data!r}")
            table, op, before, after = parse_change(data, tables, keep_unchanged=keep_unchanged)
            pending.append((lsn, xid, table, op, before, after))
    if pending is not None:
        raise ValueError("the stream ends inside a transaction")
    return events


# -- the source --------------------------------------------------------------------------------------

_db_counter = itertools.count()


class ChangeSource:
    """A PostgreSQL database whose logical-decoding stream is the change feed and whose tables the oracle.

    Starts its own ``PostgresServer`` with ``LOGICAL_SETTINGS`` unless ``server`` is given (which must run
    with ``wal_level=logical``; it is then shared and left running). Each source gets a fresh database,
    a ``test_decoding`` slot created before any write, and the ``tables`` with ``REPLICA IDENTITY FULL``.
    """

    def __init__(
        self, tables: Sequence[TableSpec] = DEFAULT_TABLES, *, server: PostgresServer | None = None
    ) -> None:
        self.tables: dict[str, TableSpec] = {t.name: t for t in tables}
        self.server = server
        self._owns_server = server is None
        self.database = f"cdc_{os.getpid()}_{next(_db_counter)}"
        self.slot = self.database
        self._reader: psycopg.Connection[Any] | None = None
        self._started = False

    # lifecycle
    def start(self) -> ChangeSource:
        if self._started:
            return self
        if self.server is None:
            self.server = PostgresServer(settings=LOGICAL_SETTINGS)
        self.server.start()
        self._started = True
        try:
            self.server.create_database(self.database)
            with self.connect(autocommit=True) as conn:
                level = conn.execute("SHOW wal_level").fetchone()
                if level is None or level[0] != "logical":
                    raise RuntimeError(
                        f"the server runs with wal_level={level}; start it with LOGICAL_SETTINGS"
                    )
                # The slot first, in a statement of its own: it can only be created outside a transaction
                # that wrote, and changes made before it exists are never decoded.
                conn.execute("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (self.slot,))
                for spec in self.tables.values():
                    conn.execute(spec.ddl())
                    conn.execute(
                        sql.SQL("ALTER TABLE {} REPLICA IDENTITY FULL").format(sql.Identifier(spec.name))
                    )
            self._reader = self.connect(autocommit=True)
            for name, value in _READER_SETTINGS.items():
                self._reader.execute("SELECT set_config(%s, %s, false)", (name, value))
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Drop the slot (it pins WAL) and the database; stop the server if this source started it."""
        if not self._started:
            return
        self._started = False
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        assert self.server is not None
        try:
            if self.server.port is not None:
                with contextlib.suppress(psycopg.Error), self._admin() as conn:
                    conn.execute(
                        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                        " WHERE slot_name = %s",
                        (self.slot,),
                    )
                    conn.execute(
                        sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                            sql.Identifier(self.database)
                        )
                    )
        finally:
            if self._owns_server:
                self.server.stop()

    def __enter__(self) -> ChangeSource:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # connections
    def _admin(self) -> psycopg.Connection[Any]:
        assert self.server is not None
        return psycopg.connect(
            host="127.0.0.1", port=self.server.port, user="postgres", dbname="postgres", autocommit=True
        )

    def connect(self, *, autocommit: bool = False) -> psycopg.Connection[Any]:
        """A new psycopg connection to this source's database (the caller closes it)."""
        if self.server is None or self.server.port is None:
            raise RuntimeError("ChangeSource is not started")
        return psycopg.connect(
            host="127.0.0.1",
            port=self.server.port,
            user="postgres",
            dbname=self.database,
            autocommit=autocommit,
        )

    @property
    def reader(self) -> psycopg.Connection[Any]:
        if self._reader is None:
            raise RuntimeError("ChangeSource is not started")
        return self._reader

    # the stream
    def raw_changes(self, *, consume: bool = False) -> list[tuple[int, int, str]]:
        """The slot's rows as (lsn, xid, text); ``consume=True`` advances the slot (get, not peek)."""
        self._wait_for_flush()
        function = "pg_logical_slot_get_changes" if consume else "pg_logical_slot_peek_changes"
        query = sql.SQL(
            "SELECT (lsn - '0/0'::pg_lsn)::bigint, xid::text::bigint, data "
            "FROM {}(%s, NULL, NULL, 'include-xids', '0', 'skip-empty-xacts', '1')"
        ).format(sql.Identifier(function))
        return [
            (int(lsn), int(xid), str(data)) for lsn, xid, data in self.reader.execute(query, (self.slot,))
        ]

    def changes(self, *, consume: bool = False, keep_unchanged: bool = False) -> list[Event]:
        """All committed changes since the slot was created (or since the last consuming read), parsed
        (``keep_unchanged``: see :func:`parse_change`)."""
        return _events_from_rows(
            self.raw_changes(consume=consume), self.tables, keep_unchanged=keep_unchanged
        )

    def _wait_for_flush(self, timeout: float = 30.0) -> None:
        # Decoding stops at the flushed WAL position; wait until everything written so far is flushed.
        target = self.reader.execute("SELECT pg_current_wal_lsn()").fetchone()
        assert target is not None
        deadline = time.monotonic() + timeout
        while True:
            row = self.reader.execute(
                "SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", (target[0],)
            ).fetchone()
            if row is not None and row[0]:
                return
            if time.monotonic() > deadline:
                raise RuntimeError("WAL was not flushed in time")
            time.sleep(0.02)

    # the oracle
    def expected(self, table: str) -> list[Row]:
        """``SELECT *`` of ``table`` ordered by key, as dicts in column order (timestamps in UTC)."""
        spec = self.tables[table]
        query = sql.SQL("SELECT {} FROM {} ORDER BY {}").format(
            sql.SQL(", ").join(map(sql.Identifier, spec.names)),
            sql.Identifier(spec.name),
            sql.SQL(", ").join(map(sql.Identifier, spec.key)),
        )
        rows = []
        for values in self.reader.execute(query):
            row = dict(zip(spec.names, values))
            for name, value in row.items():
                if isinstance(value, datetime):
                    row[name] = value.astimezone(UTC)  # psycopg gives ZoneInfo('Etc/UTC')
                elif isinstance(value, memoryview):
                    row[name] = bytes(value)
            rows.append(row)
        return rows

    def expected_model(self, table: str) -> dict[Key, Row]:
        """``expected(table)`` keyed like ``apply_in_sequence``'s result."""
        spec = self.tables[table]
        return {spec.key_of(row): row for row in self.expected(table)}

    def run_workload(self, rng: random.Random, **options: Any) -> WorkloadLog:
        """Run a random workload on this source's tables (see ``run_workload`` for the options)."""
        return run_workload(self, rng, **options)


# -- applying ----------------------------------------------------------------------------------------


def in_sequence(events: Iterable[Event]) -> list[Event]:
    """The events de-duplicated (by ``seq``; duplicates must be identical) and sorted by ``seq``."""
    by_seq: dict[int, Event] = {}
    for event in events:
        seen = by_seq.setdefault(event.seq, event)
        if seen != event:
            raise ValueError(f"two different events share seq {event.seq}: {seen} / {event}")
    return [by_seq[s] for s in sorted(by_seq)]


def apply_in_order(events: Iterable[Event], *, strict: bool = False) -> dict[Key, Row]:
    """Apply events of one table in the order given: insert/update put the after-image under its key
    (an update that changes the key first removes the old key), delete removes the key.

    ``strict`` checks that the stream is consistent: inserts of absent keys, updates and deletes whose
    before-image is exactly the current row (``REPLICA IDENTITY FULL`` makes that checkable).
    """
    model: dict[Key, Row] = {}
    table: str | None = None
    for event in events:
        if table is None:
            table = event.table
        elif event.table != table:
            raise ValueError(f"events of several tables: {table}, {event.table}")
        if event.before is not None:
            before_key = event.before_key
            assert before_key is not None
            if strict and (before_key not in model or diff_rows(model[before_key], event.before)):
                current = model.get(before_key)
                raise AssertionError(f"seq {event.seq}: before-image {event.before} is not the row {current}")
            if event.op == "delete" or event.key_changed:
                model.pop(before_key, None)
        if event.after is not None:
            after_key = event.after_key
            assert after_key is not None
            if strict and event.op == "insert" and after_key in model:
                raise AssertionError(f"seq {event.seq}: insert of present key {after_key}")
            model[after_key] = dict(event.after)
    return model


def apply_in_sequence(events: Iterable[Event], *, strict: bool = True) -> dict[Key, Row]:
    """The reference: ``apply_in_order(in_sequence(events))`` (strictly checked by default)."""
    return apply_in_order(in_sequence(events), strict=strict)


def _same_value(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, Decimal):
        return str(a) == str(b)  # same digits and scale, not only the same number
    if isinstance(a, datetime):
        return bool(a == b and a.utcoffset() == b.utcoffset())
    return bool(a == b)


def diff_rows(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Differences between two rows, comparing types and values exactly."""
    out = []
    for name in sorted(set(a) | set(b), key=str):
        if name not in a or name not in b:
            out.append(f"{name}: only in {'first' if name in a else 'second'}")
        elif not _same_value(a[name], b[name]):
            out.append(f"{name}: {a[name]!r} != {b[name]!r}")
    return out


def diff_models(actual: Mapping[Key, Row], expected: Mapping[Key, Row], limit: int = 20) -> list[str]:
    """Readable differences between two {key: row} models (empty when they are exactly equal)."""
    out = []
    for key in sorted(set(actual) | set(expected), key=repr):
        if key not in actual:
            out.append(f"{key!r}: missing (expected {expected[key]!r})")
        elif key not in expected:
            out.append(f"{key!r}: unexpected {actual[key]!r}")
        else:
            out.extend(f"{key!r}: {d}" for d in diff_rows(actual[key], expected[key]))
        if len(out) >= limit:
            break
    return out


# -- delivery and landing ----------------------------------------------------------------------------


def deliver(
    events: Sequence[Event],
    rng: random.Random,
    *,
    batches: int,
    duplicates: float = 0.1,
    replay_batches: int = 1,
) -> list[list[Event]]:
    """At-least-once delivery: the events (plus ``duplicates`` x as many repeated ones) shuffled into
    ``batches`` batches (later events may land in earlier batches), then ``replay_batches`` whole batches
    delivered again at the end."""
    if batches < 1:
        raise ValueError("batches must be >= 1")
    pool = list(events)
    if pool:
        pool += [rng.choice(pool) for _ in range(round(len(pool) * duplicates))]
    rng.shuffle(pool)
    out: list[list[Event]] = [[] for _ in range(batches)]
    for event in pool:
        out[rng.randrange(batches)].append(event)
    out += [list(out[rng.randrange(batches)]) for _ in range(replay_batches)]
    return out


def arrow_schema(table: TableSpec) -> pa.Schema:
    """The CDC landing schema: the table's columns, ``op`` ('c'/'u'/'d') and ``lsn`` (the seq)."""
    fields = [pa.field(c.name, c.arrow_type, nullable=c.nullable) for c in table.columns]
    fields += [pa.field("op", pa.string(), nullable=False), pa.field("lsn", pa.int64(), nullable=False)]
    return pa.schema(fields)


def to_arrow_events(
    events: Iterable[Event], table: TableSpec, *, split_key_changes: bool = False
) -> pa.Table:
    """The events of ``table`` as a Debezium-like Arrow table, in the order given.

    Rows carry the after-image for 'c'/'u' and the before-image for 'd'; ``lsn`` is the event's ``seq``.
    With ``split_key_changes`` an update that changes the key lands as 'd' of the old row followed by 'c'
    of the new one, both with the update's ``lsn`` (they concern different keys, so per-key order holds).
    """
    rows: list[Row] = []
    for event in events:
        if event.table != table.name:
            continue
        if event.op == "insert":
            assert event.after is not None
            rows.append({**event.after, "op": "c", "lsn": event.seq})
        elif event.op == "delete":
            assert event.before is not None
            rows.append({**event.before, "op": "d", "lsn": event.seq})
        elif split_key_changes and event.key_changed:
            assert event.before is not None and event.after is not None
            rows.append({**event.before, "op": "d", "lsn": event.seq})
            rows.append({**event.after, "op": "c", "lsn": event.seq})
        else:
            assert event.after is not None
            rows.append({**event.after, "op": "u", "lsn": event.seq})
    return pa.Table.from_pylist(rows, schema=arrow_schema(table))


# -- the workload ------------------------------------------------------------------------------------

# Text fragments that stress test_decoding's quoting and naive parsers: quotes, the format's own markers,
# whitespace that str.splitlines() treats as line ends, combining and astral characters.
_TEXT_PIECES = (
    "", "'", "''", "it's", "'x'", '"', '""', "\\", "\\\\", "\\x00", "\\'",
    "\n", "\r\n", "\r", "\t", " ", "  ",
    "null", "NULL", "true", "unchanged-toast-datum", " new-tuple: ", "old-key: ", "a[text]:'x' ", "]:", "[",
    ":", "é", "ß", "e\u0301", "日本語", "🦆", "\u2028", "\u0085", "\x0b", "\x1f", "\x7f", "ÿ", "\ufeff",
)  # fmt: skip
_ACCOUNTS = ("acme", "", "o'brien", "''", "a b", "new-tuple: x", "日本", "\\", "🦆\n", "null")


def _random_text(rng: random.Random, *, toast: float) -> str:
    if rng.random() < toast:
        # Long and poorly compressible: stored out of line, so updates that keep it decode it as
        # unchanged-toast-datum in the new image.
        return "".join(
            rng.choice("abcdefghijklmnopqrstuvwxyz0123456789'\n") for _ in range(rng.randint(2500, 4000))
        )
    parts = [
        rng.choice(_TEXT_PIECES) if rng.random() < 0.7 else chr(rng.randint(32, 0x2FF))
        for _ in range(rng.randint(0, 5))
    ]
    return "".join(parts)


_EPOCH0 = datetime(1, 1, 1, tzinfo=UTC)
_TS_SPAN_US = (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC) - _EPOCH0) // timedelta(microseconds=1)
_FLOATS = (
    0.0,
    -0.0,
    1.0,
    0.1,
    1 / 3,
    -2.5,
    5e-324,
    2.2250738585072014e-308,
    1.7976931348623157e308,
    math.inf,
    -math.inf,
)


def random_value(column: Column, rng: random.Random, *, null_rate: float = 0.15, toast: float = 0.0) -> Any:
    """A random value of ``column``'s type (NULL at ``null_rate`` when nullable)."""
    if column.nullable and rng.random() < null_rate:
        return None
    base = column.base_type
    edge = rng.random() < 0.3
    if base in ("integer", "bigint"):
        bits = 31 if base == "integer" else 63
        return (
            rng.choice((0, 1, -1, 2**bits - 1, -(2**bits))) if edge else rng.randint(-(2**bits), 2**bits - 1)
        )
    if base == "numeric":
        precision, scale = _precision_scale(column.pg_type)
        limit = 10**precision - 1
        units = rng.choice((0, 1, -1, limit, -limit)) if edge else rng.randint(-limit, limit)
        return Decimal(units).scaleb(-scale)
    if base == "double precision":
        if edge:
            return rng.choice(_FLOATS)
        if rng.random() < 0.5:
            return round(rng.uniform(-1e6, 1e6), rng.randint(0, 6))
        while True:  # any bit pattern except NaN (NaN != NaN would break the oracle's equality)
            value: float = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
            if not math.isnan(value):
                return value
    if base == "text":
        return _random_text(rng, toast=toast)
    if base == "boolean":
        return rng.random() < 0.5
    if base == "date":
        specials = (date.min, date.max, date(1970, 1, 1), date(2000, 2, 29), date(1582, 10, 4))
        return rng.choice(specials) if edge else date.fromordinal(rng.randint(1, date.max.toordinal()))
    if base == "timestamp with time zone":
        if edge:
            return rng.choice(
                (
                    _EPOCH0,
                    _EPOCH0 + timedelta(microseconds=_TS_SPAN_US),
                    datetime(1970, 1, 1, tzinfo=UTC),
                )
            )
        return _EPOCH0 + timedelta(microseconds=rng.randrange(_TS_SPAN_US + 1))
    if base == "bytea":
        if rng.random() < toast:
            return rng.randbytes(rng.randint(2500, 4000))
        return (
            rng.choice((b"", b"\x00", b"\x00\x00'\\x", b"\\x00"))
            if edge
            else rng.randbytes(rng.randint(0, 16))
        )
    raise AssertionError(base)


@dataclass
class WorkloadLog:
    """What ``run_workload`` did: xids in commit order, rolled-back xids, rows changed by committed
    statements (= the number of events to expect), and counts of the statement kinds run."""

    committed: list[int] = field(default_factory=list)
    rolled_back: list[int] = field(default_factory=list)
    rows_changed: int = 0
    statements: Counter[str] = field(default_factory=Counter)


class _Workload:
    def __init__(self, source: ChangeSource, rng: random.Random, toast: float) -> None:
        self.source = source
        self.rng = rng
        self.toast = toast
        self.counter = itertools.count(1)
        self.deleted: dict[str, set[Key]] = {t: set() for t in source.tables}
        # A few values per partition column, so partition changes move rows between real "partitions".
        self.partitions = {
            spec.name: [random_value(spec.column(spec.partition), rng) for _ in range(4)]
            for spec in source.tables.values()
            if spec.partition
        }
        self.log = WorkloadLog()

    # helpers
    def row(self, spec: TableSpec, key: Key) -> Row:
        row = {c.name: random_value(c, self.rng, toast=self.toast) for c in spec.columns}
        row.update(zip(spec.key, key))
        if spec.partition:
            row[spec.partition] = self.rng.choice(self.partitions[spec.name])
        return row

    def fresh_key(self, spec: TableSpec) -> Key:
        # Integer parts come from a counter, so a key with one is new; text parts repeat from a small pool.
        parts: list[Any] = []
        for name in spec.key:
            base = spec.column(name).base_type
            parts.append(next(self.counter) if base in ("integer", "bigint") else self.rng.choice(_ACCOUNTS))
        if not any(isinstance(p, int) for p in parts):
            parts[-1] = f"{parts[-1]}#{next(self.counter)}"
        return tuple(parts)

    def new_key(self, spec: TableSpec, old: Key, taken: set[Key], side: bool) -> Key:
        """A key not in ``taken``: sometimes a deleted one (re-use), sometimes ``old`` with parts replaced.

        A side transaction does not see the main one's uncommitted keys, so it only takes fresh ones.
        """
        if side:
            return self.fresh_key(spec)
        reusable = sorted(self.deleted[spec.name] - taken, key=repr)
        if reusable and self.rng.random() < 0.3:
            self.log.statements["reuse-key"] += 1
            return self.rng.choice(reusable)
        for _ in range(5):
            fresh = self.fresh_key(spec)
            mixed = tuple(f if self.rng.random() < 0.5 else o for f, o in zip(fresh, old))
            if mixed not in taken and mixed != old:
                return mixed
        return self.fresh_key(spec)

    def present(self, conn: psycopg.Connection[Any], spec: TableSpec, *, own: bool = False) -> list[Key]:
        """The keys of ``spec`` the transaction sees; ``own``: only rows it wrote itself.

        A side transaction runs while the main one holds row locks: it touches only rows it wrote, so it
        never waits (a wait would hang this single-threaded runner).
        """
        query = sql.SQL("SELECT {} FROM {}").format(
            sql.SQL(", ").join(map(sql.Identifier, spec.key)), sql.Identifier(spec.name)
        )
        if own:
            query += sql.SQL(" WHERE xmin::text::bigint = pg_current_xact_id()::text::bigint % 4294967296")
        return sorted((tuple(r) for r in conn.execute(query)), key=repr)  # stable order for the rng

    def cast(self, spec: TableSpec, name: str) -> sql.Composable:
        return sql.SQL("%s::{}").format(sql.SQL(spec.column(name).pg_type))

    def key_tuple(self, spec: TableSpec) -> sql.Composable:
        return sql.SQL("({})").format(sql.SQL(", ").join(self.cast(spec, k) for k in spec.key))

    def where_keys(self, spec: TableSpec, keys: Sequence[Key]) -> tuple[sql.Composable, list[Any]]:
        cond = sql.SQL("({}) IN ({})").format(
            sql.SQL(", ").join(map(sql.Identifier, spec.key)),
            sql.SQL(", ").join([self.key_tuple(spec)] * len(keys)),
        )
        return cond, [v for key in keys for v in key]

    def returning_keys(self, spec: TableSpec) -> sql.Composable:
        return sql.SQL(" RETURNING {}").format(sql.SQL(", ").join(map(sql.Identifier, spec.key)))

    # statements; each returns the number of rows it changed
    def insert(self, conn: psycopg.Connection[Any], spec: TableSpec, present: list[Key], side: bool) -> int:
        taken = set(present)
        keys: list[Key] = []
        for _ in range(self.rng.randint(1, 3)):
            reusable = sorted(self.deleted[spec.name] - taken, key=repr)
            if reusable and not side and self.rng.random() < 0.4:
                key = self.rng.choice(reusable)
                self.log.statements["reinsert"] += 1
            else:
                key = self.fresh_key(spec)
            taken.add(key)
            keys.append(key)
        rows = [self.row(spec, k) for k in keys]
        upsert = not side and bool(present) and self.rng.random() < 0.25
        if upsert:  # INSERT ... ON CONFLICT DO UPDATE: inserts and updates in one statement
            existing = self.rng.sample(present, min(len(present), self.rng.randint(1, 2)))
            rows += [self.row(spec, k) for k in existing]
            self.rng.shuffle(rows)
        values = sql.SQL("({})").format(sql.SQL(", ").join(self.cast(spec, n) for n in spec.names))
        query = sql.SQL("INSERT INTO {} ({}) VALUES {}").format(
            sql.Identifier(spec.name),
            sql.SQL(", ").join(map(sql.Identifier, spec.names)),
            sql.SQL(", ").join([values] * len(rows)),
        )
        if upsert:
            others = [n for n in spec.names if n not in spec.key]
            query += sql.SQL(" ON CONFLICT ({}) DO UPDATE SET {}").format(
                sql.SQL(", ").join(map(sql.Identifier, spec.key)),
                sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(n)) for n in others),
            )
        self.log.statements["upsert" if upsert else "insert"] += 1
        if len(rows) > 1:
            self.log.statements["multi-row"] += 1
        return conn.execute(query, [row[n] for row in rows for n in spec.names]).rowcount

    def update(self, conn: psycopg.Connection[Any], spec: TableSpec, present: list[Key], side: bool) -> int:
        if not present:
            return self.insert(conn, spec, present, side)
        kind = self.rng.choice(
            ("values", "values", "key", "partition", "noop") if spec.partition else ("values", "key")
        )
        targets = self.rng.sample(present, min(len(present), self.rng.randint(1, 3)))
        values_cols = [c for c in spec.columns if c.name not in spec.key and c.name != spec.partition]
        sets: list[tuple[str, Any]] = []
        if kind in ("values", "key", "partition"):
            picked = self.rng.sample(
                values_cols, self.rng.randint(1 if kind == "values" else 0, len(values_cols))
            )
            sets += [(c.name, random_value(c, self.rng, toast=self.toast)) for c in picked]
        if kind == "partition":
            assert spec.partition is not None
            sets.append((spec.partition, self.rng.choice(self.partitions[spec.name])))
        self.log.statements[f"update-{kind}"] += 1
        if len(targets) > 1:
            self.log.statements["multi-row"] += 1
        assignments = [sql.SQL("{} = {}").format(sql.Identifier(n), self.cast(spec, n)) for n, _ in sets]
        params = [v for _, v in sets]
        if kind == "noop":  # an update that writes the same values still produces an event
            assignments = [sql.SQL("{0} = {0}").format(sql.Identifier(values_cols[0].name))]
        if kind == "partition" and not side and self.rng.random() < 0.3:
            # set-based: every row of one partition value moves (may be none, may be many)
            assert spec.partition is not None
            by_partition = sql.SQL("{} = {}").format(
                sql.Identifier(spec.partition), self.cast(spec, spec.partition)
            )
            query = sql.SQL("UPDATE {} SET {} WHERE {}").format(
                sql.Identifier(spec.name), sql.SQL(", ").join(assignments), by_partition
            )
            return conn.execute(query, [*params, self.rng.choice(self.partitions[spec.name])]).rowcount
        if kind != "key":
            where, where_params = self.where_keys(spec, targets)
            query = sql.SQL("UPDATE {} SET {} WHERE {}").format(
                sql.Identifier(spec.name), sql.SQL(", ").join(assignments), where
            )
            return conn.execute(query, [*params, *where_params]).rowcount
        # Key changes, several rows in one statement through a VALUES list of (old key, new key).
        taken = set(present)
        pairs = []
        for old in targets:
            new = self.new_key(spec, old, taken, side)
            taken.add(new)
            pairs.append((old, new))
        olds = [f"o{i}" for i in range(len(spec.key))]
        news = [f"n{i}" for i in range(len(spec.key))]
        row_sql = sql.SQL("({}, {})").format(
            sql.SQL(", ").join(self.cast(spec, k) for k in spec.key),
            sql.SQL(", ").join(self.cast(spec, k) for k in spec.key),
        )
        key_sets = [
            sql.SQL("{} = v.{}").format(sql.Identifier(k), sql.Identifier(n)) for k, n in zip(spec.key, news)
        ]
        query = sql.SQL("UPDATE {} AS t SET {} FROM (VALUES {}) AS v({}) WHERE ({}) = ({})").format(
            sql.Identifier(spec.name),
            sql.SQL(", ").join(key_sets + assignments),
            sql.SQL(", ").join([row_sql] * len(pairs)),
            sql.SQL(", ").join(map(sql.Identifier, olds + news)),
            sql.SQL(", ").join(sql.SQL("t.{}").format(sql.Identifier(k)) for k in spec.key),
            sql.SQL(", ").join(sql.SQL("v.{}").format(sql.Identifier(o)) for o in olds),
        )
        query += self.returning_keys(spec)
        pair_params = [v for old, new in pairs for v in (*old, *new)]
        cur = conn.execute(query, [*params, *pair_params])
        moved = {old for old, _ in pairs}
        self.deleted[spec.name] |= moved  # the old keys are free again: candidates for re-insertion
        self.deleted[spec.name] -= {tuple(r) for r in cur.fetchall()}
        return cur.rowcount

    def delete(self, conn: psycopg.Connection[Any], spec: TableSpec, present: list[Key], side: bool) -> int:
        if not present:
            return self.insert(conn, spec, present, side)
        if spec.partition and not side and self.rng.random() < 0.15:
            where: sql.Composable = sql.SQL("{} = {}").format(
                sql.Identifier(spec.partition), self.cast(spec, spec.partition)
            )
            params: list[Any] = [self.rng.choice(self.partitions[spec.name])]
            self.log.statements["delete-partition"] += 1
        else:
            targets = self.rng.sample(present, min(len(present), self.rng.randint(1, 3)))
            where, params = self.where_keys(spec, targets)
            self.log.statements["delete"] += 1
            if len(targets) > 1:
                self.log.statements["multi-row"] += 1
        query = sql.SQL("DELETE FROM {} WHERE {}").format(
            sql.Identifier(spec.name), where
        ) + self.returning_keys(spec)
        cur = conn.execute(query, params)
        self.deleted[spec.name] |= {tuple(r) for r in cur.fetchall()}
        return cur.rowcount

    def statement(self, conn: psycopg.Connection[Any], *, side: bool = False) -> int:
        spec = self.rng.choice(list(self.source.tables.values()))
        present = self.present(conn, spec, own=side)
        action = self.rng.choices((self.insert, self.update, self.delete), weights=(4, 5, 2))[0]
        return action(conn, spec, present, side)

    def transaction(
        self,
        conn: psycopg.Connection[Any],
        side_conn: psycopg.Connection[Any],
        interleave: float,
        rollback: float,
        savepoint: float,
    ) -> None:
        xid = self._xid(conn)
        changed = 0
        side_after = self.rng.randrange(5) if self.rng.random() < interleave else None
        for i in range(self.rng.randint(1, 5)):
            if self.rng.random() < savepoint:  # a rolled-back subtransaction inside a transaction
                conn.execute("SAVEPOINT sp")
                self.statement(conn)
                conn.execute("ROLLBACK TO SAVEPOINT sp")
                self.log.statements["rolled-back-savepoint"] += 1
            changed += self.statement(conn)
            if side_after == i:
                self.side_transaction(side_conn, rollback)
        self.finish(conn, xid, changed, rollback)

    def side_transaction(self, conn: psycopg.Connection[Any], rollback: float) -> None:
        # Starts after and commits before the open main transaction: commit order differs from the order
        # of the changes' own LSNs.
        xid = self._xid(conn)
        changed = sum(self.statement(conn, side=True) for _ in range(self.rng.randint(1, 3)))
        self.log.statements["interleaved"] += 1
        self.finish(conn, xid, changed, rollback)

    def finish(self, conn: psycopg.Connection[Any], xid: int, changed: int, rollback: float) -> None:
        if self.rng.random() < rollback:
            conn.rollback()
            self.log.rolled_back.append(xid)
        else:
            conn.commit()
            self.log.committed.append(xid)
            self.log.rows_changed += changed

    @staticmethod
    def _xid(conn: psycopg.Connection[Any]) -> int:
        # Assigns the transaction its xid now; test_decoding reports the 32-bit xid (epoch 0 here).
        row = conn.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
        assert row is not None
        return int(row[0]) & 0xFFFFFFFF


def run_workload(
    source: ChangeSource,
    rng: random.Random,
    *,
    transactions: int = 30,
    rollback: float = 0.15,
    savepoint: float = 0.1,
    interleave: float = 0.15,
    toast: float = 0.02,
) -> WorkloadLog:
    """Run ``transactions`` random transactions of 1-5 statements against ``source``'s tables.

    Statements: multi-row inserts (fresh keys and re-inserts of deleted ones), upserts, updates of values,
    of the key (several rows at once), of the partition column (by key and set-based), no-op updates,
    deletes (by key and set-based). ``rollback``: share of transactions rolled back; ``savepoint``: share
    of statements preceded by a statement in a rolled-back savepoint; ``interleave``: share of transactions
    during which a second connection runs and commits a whole transaction; ``toast``: share of text/bytea
    values long enough to be TOASTed.
    """
    work = _Workload(source, rng, toast)
    with source.connect() as conn, source.connect() as side_conn:
        for c in (conn, side_conn):
            # per session, whatever the server's default: decoding only sees flushed WAL
            c.execute("SET synchronous_commit = on")
            c.execute("SET lock_timeout = '10s'")  # a lock wait is a harness bug: fail, do not hang
            c.commit()
        for _ in range(transactions):
            work.transaction(conn, side_conn, interleave, rollback, savepoint)
    return work.log
