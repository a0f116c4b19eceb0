"""Change events rendered as the JSON lines real CDC tools write: Debezium envelopes (JSON converter with
schemas) and wal2json ``format-version`` 2 records, for the whole-database sync tests."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

Row = Mapping[str, Any]

_EPOCH = date(1970, 1, 1)


def _pg_text(value: Any) -> str:
    """A value as wal2json writes it in JSON: numbers bare, bytea as \\x hex, the rest quoted."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, Decimal)):
        return str(value)
    if isinstance(value, float):
        return json.dumps(value)
    if isinstance(value, bytes):
        return json.dumps("\\x" + value.hex())
    if isinstance(value, datetime):
        return json.dumps(value.astimezone(UTC).isoformat(sep=" "))
    if isinstance(value, date):
        return json.dumps(value.isoformat())
    return json.dumps(value)


def _w2j_columns(row: Row, types: Mapping[str, str]) -> str:
    return (
        "["
        + ",".join(
            f'{{"name":{json.dumps(n)},"type":{json.dumps(types[n])},"value":{_pg_text(v)}}}'
            for n, v in row.items()
        )
        + "]"
    )


def wal2json_line(
    schema: str,
    table: str,
    op: str,
    before: Row | None,
    after: Row | None,
    lsn: int,
    types: Mapping[str, str],
    key: Sequence[str] | None,
) -> str:
    """One wal2json v2 record (op ``I``/``U``/``D``; ``types``: PostgreSQL type names by column)."""
    parts = [
        f'"action":{json.dumps(op)}',
        f'"schema":{json.dumps(schema)}',
        f'"table":{json.dumps(table)}',
        f'"lsn":"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"',
    ]
    if after is not None:
        parts.append(f'"columns":{_w2j_columns(after, types)}')
    if before is not None:
        parts.append(f'"identity":{_w2j_columns(before, types)}')
    if key is not None:
        parts.append('"pk":' + json.dumps([{"name": k, "type": types[k]} for k in key]))
    return "{" + ",".join(parts) + "}"


# PostgreSQL type -> (Connect type, logical name) as Debezium's PostgreSQL connector writes them
# (decimal.handling.mode=string, time.precision.mode=adaptive_time_microseconds, binary.handling.mode=bytes)
_DEBEZIUM_TYPES = {
    "smallint": ("int16", None),
    "integer": ("int32", None),
    "bigint": ("int64", None),
    "double precision": ("double", None),
    "real": ("float", None),
    "text": ("string", None),
    "boolean": ("boolean", None),
    "date": ("int32", "io.debezium.time.Date"),
    "timestamp with time zone": ("string", "io.debezium.time.ZonedTimestamp"),
    "timestamp without time zone": ("int64", "io.debezium.time.MicroTimestamp"),
    "bytea": ("bytes", None),
}


def _debezium_value(value: Any, connect: tuple[str, str | None]) -> Any:
    if value is None:
        return None
    kind, name = connect
    if name == "io.debezium.time.Date":
        return (value - _EPOCH).days
    if name == "io.debezium.time.ZonedTimestamp":
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if name == "io.debezium.time.MicroTimestamp":
        delta = value - datetime(1970, 1, 1)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if kind == "bytes":
        return base64.b64encode(value).decode()
    if isinstance(value, Decimal):
        return str(value)
    return value


def debezium_line(
    schema: str,
    table: str,
    op: str,
    before: Row | None,
    after: Row | None,
    lsn: int,
    types: Mapping[str, str],
    wrapped: bool = True,
) -> str:
    """One Debezium envelope (op ``c``/``u``/``d``/``r``; ``types``: PostgreSQL type names by column)."""
    connect = {n: _DEBEZIUM_TYPES.get(t, ("string", None)) for n, t in types.items()}

    def image(row: Row | None) -> dict[str, Any] | None:
        return None if row is None else {n: _debezium_value(v, connect[n]) for n, v in row.items()}

    payload = {
        "before": image(before),
        "after": image(after),
        "op": op,
        "ts_ms": 1_700_000_000_000,
        "source": {"schema": schema, "table": table, "lsn": lsn, "ts_ms": 1_700_000_000_000},
    }
    if not wrapped:
        return json.dumps(payload)
    fields = [
        {"field": n, "type": k, **({"name": name} if name else {}), "optional": True}
        for n, (k, name) in connect.items()
    ]
    envelope_schema = {
        "type": "struct",
        "fields": [
            {"field": "before", "type": "struct", "fields": fields, "optional": True},
            {"field": "after", "type": "struct", "fields": fields, "optional": True},
        ],
    }
    return json.dumps({"schema": envelope_schema, "payload": payload})


def debezium_key(row: Row, key: Sequence[str]) -> str:
    """The Kafka message key of a row (JSON converter without schemas)."""
    return json.dumps({k: row[k] for k in key})


def render_change(
    op: str,
    before: Row | None,
    after: Row | None,
    lsn: int,
    fmt: str,
    table: str,
    types: Mapping[str, str],
    key: Sequence[str],
) -> tuple[str, str | None]:
    """A decoded change (op ``insert`` / ``update`` / ``delete``, images as the source logged them: an
    update's unchanged TOASTed column absent) as the line, and Debezium's message key, each tool writes:
    wal2json leaves the column out and names the old row by its key (``REPLICA IDENTITY DEFAULT``),
    Debezium writes its placeholder for it."""
    from mere.integrations.cdc_sync import UNAVAILABLE_VALUE

    code = {"insert": "c", "update": "u", "delete": "d"}[op]
    if fmt == "wal2json":
        identity = None if before is None else {k: before[k] for k in key}
        return wal2json_line(
            "public", table, code.upper().replace("C", "I"), identity, after, lsn, types, key
        ), None
    if after is not None and op == "update":
        after = {c: after.get(c, UNAVAILABLE_VALUE) for c in types}
    line = debezium_line("public", table, code, before, after, lsn, types)
    return line, debezium_key(after or before or {}, key)
