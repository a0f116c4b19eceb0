"""Support for the sequence-group trials (tests/table/test_sequence_groups_trial55.py and
test_group_ties_trial57.py): the table's schema, one change event, the CDC batch of events, the dict
model of the documented merge, and a table's rows by key."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

import mere

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


def model(events: list[Ev]) -> dict[int, dict[str, Any]]:
    """The documented merge of events given in arrival (commit, then row) order."""
    out: dict[int, dict[str, Any]] = {}
    for k in sorted({e.k for e in events}):
        evs = [(i, e) for i, e in enumerate(events) if e.k == k]
        dels = [e.lsn for _, e in evs if e.op == "d"]
        d = max(dels) if dels else None
        ups = [(i, e) for i, e in evs if e.op == "u"]
        live = [(i, e) for i, e in ups if d is None or e.lsn > d]
        if not live:
            continue
        _, top = max(live, key=lambda ie: (ie[1].lsn, ie[0]))
        row: dict[str, Any] = {"k": k, "name": top.name, "lsn": top.lsn}
        pc = [
            (e.price[2], i, e.price)
            for i, e in ups
            if e.price is not None and e.price[2] is not None and (d is None or e.price[2] > d)
        ]
        row.update(zip(PRICE, max(pc)[-1] if pc else (None, None, None)))
        sc = [
            (e.stock[1], i, e.stock)
            for i, e in ups
            if e.stock is not None
            and e.stock[0] is not None
            and e.stock[1] is not None
            and (d is None or e.stock[1] > d)
        ]
        row.update(zip(STOCK, max(sc)[-1] if sc else (None, None)))
        out[k] = {c: row[c] for c in COLS}
    return out


def rows(t: mere.Table, **kw: Any) -> dict[int, dict[str, Any]]:
    got = t.to_arrow(**kw).to_pylist()
    out = {r["k"]: r for r in got}
    assert len(out) == len(got), f"a key came out twice: {sorted(r['k'] for r in got)}"
    return out
