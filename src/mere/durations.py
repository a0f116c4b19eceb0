"""Durations written as text (``7d``, ``1h30m``, ``90s``, ``2.5h``, ``0``): table properties and the CLI."""

from __future__ import annotations

import datetime as dt
import re

_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)", re.IGNORECASE)
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str) -> dt.timedelta:
    """``'7d'``, ``'1h30m'``, ``'90s'``, ``'2.5h'``, ``'0'`` as a timedelta (units ms, s, m, h, d, w).

    Raises ValueError for other text, OverflowError for a duration a timedelta cannot hold.
    """
    s = text.strip()
    if s == "0":
        return dt.timedelta(0)
    pos, seconds = 0, 0.0
    for m in _PART.finditer(s):
        if m.start() != pos and s[pos : m.start()].strip():
            break
        seconds += float(m[1]) * _UNIT_SECONDS[m[2].lower()]
        pos = m.end()
    if not s or pos == 0 or s[pos:].strip():
        raise ValueError(f"{text!r} is not a duration")
    try:
        return dt.timedelta(seconds=seconds)
    except ValueError as e:  # a timedelta's own "too large" is a ValueError: say it is one
        raise OverflowError(str(e)) from None
