"""Support for the sequence-group trials (tests/table/test_sequence_groups_trial55.py and
test_group_ties_trial57.py): the table's schema, one change event, and the CDC batch of events. Each
trial keeps its own model of the documented merge."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

SCHEMA = pa.schema(
    [
        pa.field("k", pa.int64(), nullable=False),
        pa.field("price", pa.int64()),
        pa.field("currency", pa.string()),
        pa.field("price_lsn", pa.int64()),
        pa.field("stock", pa.int64()),
        pa.field("stock_lsn", pa.int64()),
        pa.field("name", pa.string()),
        pa.field("lsn", pa.int64(), nullable=False),
        pa.field("op", pa.string()),
    ]
)
COLS = [n for n in SCHEMA.names if n != "op"]
PRICE = ("price", "currency", "price_lsn")
STOCK = ("stock", "stock_lsn")


@dataclass(frozen=True)
class Ev:
    k: int
    lsn: int
    op: str  # "u" or "d"
    name: str | None = None
    price: tuple[int | None, str | None, int | None] | None = None  # (price, currency, price_lsn)
    stock: tuple[int | None, int | None] | None = None  # (stock, stock_lsn)


def batch(events: list[Ev]) -> pa.Table:
    """The CDC batch of ``events``; a group no event holds is left out (a partial write)."""
    names = list(SCHEMA.names)
    if all(e.price is None for e in events):
        names = [n for n in names if n not in PRICE]
    if all(e.stock is None for e in events):
        names = [n for n in names if n not in STOCK]
    out = []
    for e in events:
        r: dict[str, Any] = {"k": e.k, "lsn": e.lsn, "op": e.op, "name": e.name}
        r.update(zip(PRICE, e.price or (None, None, None)))
        r.update(zip(STOCK, e.stock or (None, None)))
        out.append({n: r[n] for n in names})
    return pa.Table.from_pylist(out, schema=pa.schema([SCHEMA.field(n) for n in names]))
