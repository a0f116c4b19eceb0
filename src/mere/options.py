"""Option values given as text: one rule per kind, the same at every entry point.

The command line, the Spark data source's options, storage options (``storage_options=`` of the Python API,
``--storage-option`` and ``MERE_STORAGE_OPTIONS`` of the command line, ``storage.<key>`` of Spark) and
``as_of`` arguments read their values with these functions, so a text means the same wherever it is given
and anything else is refused with :class:`~mere.errors.InvalidInput` naming the option:

Text that is empty or blank means the option is not given (its default applies), for booleans, byte
sizes and column lists alike; a point in time must be given.

- **Booleans**: ``true``/``false``, ``yes``/``no``, ``on``/``off``, ``y``/``n``, ``t``/``f`` and ``1``/``0``,
  in any case, spaces around ignored.
- **Byte sizes**: a whole number of bytes, optionally followed (spaces between allowed) by a unit ``b``,
  ``k``/``kb``/``kib``, ``m``/``mb``/``mib`` or ``g``/``gb``/``gib`` in any case; every unit is a power of
  1024, as in Spark's settings (``128m``, ``1g``) and ``1MiB`` alike.
- **Column lists**: names separated by commas, spaces around each name dropped; a name holding a comma or
  a double quote is written in double quotes, as in CSV (``id,"a,b"``; a quote inside doubled). An empty
  name (``a,,b``) or an unclosed quote is refused.
- **Points in time** (``as_of``): a ``datetime``, seconds since the epoch (a number, or text of one such as
  ``1700000000`` or ``1.7e9``), or ISO 8601 text (``2026-11-21T08:00:00+00:00``). A time without a zone
  is returned without one: the Python API and the command line read it as UTC (:func:`as_of_micros`),
  Spark in the session time zone, as Spark reads its own timestamps.

This module depends on nothing of mere but its errors, so that every layer may use it.
"""

from __future__ import annotations

import csv
import datetime as dt
import math
import re
from collections.abc import Sequence
from typing import Any

from mere.errors import InvalidInput

__all__ = [
    "BYTE_UNITS",
    "FALSE_WORDS",
    "TRUE_WORDS",
    "as_of_micros",
    "format_columns",
    "parse_as_of",
    "parse_bool",
    "parse_bytes",
    "parse_columns",
]

TRUE_WORDS = ("true", "1", "yes", "on", "y", "t")
FALSE_WORDS = ("false", "0", "no", "off", "n", "f")

_MIB = 1 << 20
BYTE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "kib": 1 << 10,
    "m": _MIB,
    "mb": _MIB,
    "mib": _MIB,
    "g": 1 << 30,
    "gb": 1 << 30,
    "gib": 1 << 30,
}
"""Byte size units (lower case) and their bytes: every one binary, as Spark's ``128m`` means 128 MiB."""

_BYTE_SIZE = re.compile(r"\s*([0-9]+)\s*([a-zA-Z]*)\s*")
_EPOCH_SECONDS = re.compile(r"\s*[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*")


def parse_bool(value: str | bool | None, what: str, default: bool = False, shown: str | None = None) -> bool:
    """A boolean option: one of :data:`TRUE_WORDS` or :data:`FALSE_WORDS` in any case; None or blank
    text is ``default``.

    Args:
        value: the text given (a bool is taken as it is).
        what: the option as messages name it, such as ``"option 'mergeSchema'"``.
        default: the value of an option not given.
        shown: the value as a message may show it (``"***"`` for a secret); default ``repr(value)``.

    Raises:
        InvalidInput: any other text.
    """
    if isinstance(value, bool):
        return value
    text = (value or "").strip().lower()
    if not text:
        return default
    if text in TRUE_WORDS:
        return True
    if text in FALSE_WORDS:
        return False
    raise InvalidInput(f"{what} must be true or false (or yes/no, on/off, 1/0), got {shown or repr(value)}")


def parse_bytes(value: str | None, what: str, minimum: int = 0, shown: str | None = None) -> int | None:
    """A byte size: a whole number, optionally with a binary unit (``64k``, ``128m``, ``1g``, ``1MiB``;
    see :data:`BYTE_UNITS`); None when not given (None or blank text).

    Raises:
        InvalidInput: anything else, or a size below ``minimum``.
    """
    if value is None or not value.strip():
        return None
    m = _BYTE_SIZE.fullmatch(value)
    unit = m.group(2).lower() if m else ""
    size = int(m.group(1)) * BYTE_UNITS[unit] if m and unit in BYTE_UNITS else None
    if size is None or size < minimum:
        least = f" of at least {minimum}" if minimum > 0 else ""
        raise InvalidInput(
            f"{what} must be a byte size{least} (e.g. 1048576, 64k, 128m, 1g or 1MiB), got "
            f"{shown or repr(value)}"
        )
    return size


def parse_columns(text: str | None, what: str | None = None) -> list[str] | None:
    """Column names separated by commas; a name holding a comma or a double quote is quoted as in CSV
    (``'id,"a,b"'``; a quote inside doubled). Spaces around a name go, quoted or not. None when not given
    (None or blank text).

    Raises:
        InvalidInput: an empty name (``"a,,b"``) or an unclosed quote.
    """
    if text is None or not text.strip():
        return None
    if '"' in text:
        names = (
            []
            if text.count('"') % 2
            else [c.strip() for c in next(csv.reader([text], skipinitialspace=True), [])]
        )
    else:
        names = [c.strip() for c in text.split(",")]
    if not names or not all(names):
        prefix = f"{what}: " if what else ""
        raise InvalidInput(f"{prefix}{text!r} is not a comma-separated list of column names")
    return names


def format_columns(names: Sequence[str]) -> str:
    """Column names as :func:`parse_columns` reads them back, quoted only where a name holds a comma or a
    quote (spaces around a name cannot be written: the rule drops them)."""
    return ",".join('"' + n.replace('"', '""') + '"' if ("," in n or '"' in n) else n for n in names)


def parse_as_of(value: Any) -> dt.datetime:
    """A point in time: a datetime, seconds since the epoch (a number or its text) or ISO 8601 text.

    A time without a zone is returned without one: the caller decides its zone (see the module docstring).

    Raises:
        InvalidInput: anything else (a non-finite number, text of neither form).
    """
    if isinstance(value, dt.datetime):
        return value
    number: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and _EPOCH_SECONDS.fullmatch(value):
        number = float(value)
    if number is not None and math.isfinite(number):
        try:  # seconds since the epoch, within datetime's range
            return dt.datetime.fromtimestamp(number, dt.UTC)
        except (OverflowError, ValueError, OSError):
            pass
    elif number is None and isinstance(value, str):
        try:
            return dt.datetime.fromisoformat(value.strip())
        except ValueError:
            pass
    raise InvalidInput(
        f"as_of must be a datetime, an ISO 8601 string such as '2026-11-21T08:00:00+00:00' "
        f"(naive means UTC) or epoch seconds, got {value!r}"
    )


def as_of_micros(value: Any) -> int:
    """:func:`parse_as_of` in microseconds since the epoch; a time without a zone is UTC."""
    when = parse_as_of(value)
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1_000_000)
