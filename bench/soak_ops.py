"""The soak's tables and operations, and the model that replays them (used by ``bench_soak.py``).

Every operation is plain data (a dict with the table, the operation, a seed and parameters): a writer
runs it against mere, the checker replays the same dict on a model (plain Python dicts) in the order of
the versions the catalog records, so both see exactly the same rows. Row values are drawn from the
operation's seed: nothing but the dict needs logging.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa

import mere

NAMESPACE = "soak"
KEYS = 600  # keys per keyed table: small enough for collisions, so writers contend
REGIONS = ("north", "south", "east", "west")
DAYS = ("d1", "d2", "d3")

ACCOUNTS = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("v", pa.int64()),
        ("total", pa.int64()),
        ("note", pa.string()),
    ]
)
ORDERS = pa.schema(
    [
        pa.field("region", pa.string(), nullable=False),
        pa.field("id", pa.int64(), nullable=False),
        ("amount", pa.int64()),
        ("status", pa.string()),
    ]
)
EVENTS = pa.schema(
    [("day", pa.string()), ("writer", pa.string()), ("n", pa.int64()), ("payload", pa.string())]
)
CDC = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("lsn", pa.int64()),
        ("name", pa.string()),
        ("qty", pa.int64()),
    ]
)

# (operation, weight) per table.
OPERATIONS: dict[str, list[tuple[str, int]]] = {
    "accounts": [
        ("upsert", 6),
        ("delete_keys", 2),
        ("delete_where", 1),
        ("update", 2),
        ("merge", 2),
        ("transaction", 2),
    ],
    "orders": [("upsert", 5), ("overwrite_partition", 1), ("delete_where", 1)],
    "events": [("append", 5), ("overwrite_partition", 1)],
    "cdc": [("cdc", 6), ("cdc_replay", 2)],
}
TABLE_WEIGHTS = {"accounts": 4, "orders": 2, "events": 2, "cdc": 3}


def create_tables(cat: mere.Catalog) -> None:
    """The soak's four tables: keyed with a ``sum`` operator and the change log, keyed and partitioned,
    keyless and partitioned, and a CDC table ordered by a sequence column."""
    cat.create_table(
        f"{NAMESPACE}.accounts",
        ACCOUNTS,
        primary_key="id",
        buckets=4,
        merge_operators={"total": "sum"},
        properties={"changes.log": "on"},
    )
    cat.create_table(
        f"{NAMESPACE}.orders", ORDERS, primary_key=["region", "id"], partition_by="region", buckets=2
    )
    cat.create_table(f"{NAMESPACE}.events", EVENTS, partition_by="day")
    cat.create_table(f"{NAMESPACE}.cdc", CDC, primary_key="id", buckets=4, sequence_by="lsn", cdc_column="op")


# -- planning: a writer draws operations ----------------------------------------------------------------


def plan(rng: np.random.Generator, writer: str, replayable: list[dict[str, Any]]) -> dict[str, Any]:
    """Draw one operation (as data)."""
    names = list(TABLE_WEIGHTS)
    weights = np.array([TABLE_WEIGHTS[n] for n in names], dtype=float)
    table = names[int(rng.choice(len(names), p=weights / weights.sum()))]
    ops = OPERATIONS[table]
    w = np.array([x[1] for x in ops], dtype=float)
    op = ops[int(rng.choice(len(ops), p=w / w.sum()))][0]
    step: dict[str, Any] = {"table": table, "op": op, "seed": int(rng.integers(2**62)), "writer": writer}
    if op == "cdc_replay":
        earlier = [s for s in replayable if s["op"] == "cdc"]
        if not earlier:
            step["op"] = "cdc"
        else:
            # The same events again under a new key: the sequence makes them change nothing.
            step["seed"] = earlier[int(rng.integers(len(earlier)))]["seed"]
    if op in ("delete_where", "update"):
        lo = int(rng.integers(KEYS))
        step["lo"], step["hi"] = lo, lo + int(rng.integers(1, 12))
    if op == "overwrite_partition":
        step["part"] = (REGIONS if table == "orders" else DAYS)[
            int(rng.integers(4 if table == "orders" else 3))
        ]
    return step


def _rng(step: dict[str, Any]) -> np.random.Generator:
    return np.random.default_rng(step["seed"])


def _ids(rng: np.random.Generator, n: int) -> np.ndarray:
    return np.sort(rng.choice(KEYS, size=n, replace=False)).astype(np.int64)


def _notes(rng: np.random.Generator, n: int) -> list[str]:
    # High-cardinality strings (hex of random bytes) beside a repetitive status column elsewhere.
    return [bytes(b).hex() for b in rng.integers(0, 256, size=(n, 8), dtype=np.uint8)]


def account_rows(rng: np.random.Generator, n: int | None = None) -> pa.Table:
    n = int(rng.integers(1, 40)) if n is None else n
    return pa.table(
        {
            "id": _ids(rng, n),
            "v": rng.integers(0, 1000, n),
            "total": rng.integers(1, 10, n),
            "note": _notes(rng, n),
        },
        schema=ACCOUNTS,
    )


def order_rows(rng: np.random.Generator, region: str | None = None) -> pa.Table:
    n = int(rng.integers(1, 40))
    regions = [region] * n if region else [REGIONS[i] for i in rng.integers(0, 4, n)]
    ids = rng.integers(0, KEYS, n).astype(np.int64)
    # (region, id) unique within the batch
    seen: set[tuple[str, int]] = set()
    keep = []
    for i, (r, k) in enumerate(zip(regions, ids.tolist())):
        if (r, k) not in seen:
            seen.add((r, k))
            keep.append(i)
    statuses = np.array(["open", "paid", "shipped", "returned"])[rng.integers(0, 4, n)]
    return pa.table(
        {
            "region": [regions[i] for i in keep],
            "id": ids[keep],
            "amount": rng.integers(0, 10_000, n)[keep],
            "status": statuses[keep].tolist(),
        },
        schema=ORDERS,
    )


def event_rows(rng: np.random.Generator, writer: str, day: str | None = None) -> pa.Table:
    n = int(rng.integers(1, 60))
    days = [day] * n if day else [DAYS[i] for i in rng.integers(0, 3, n)]
    return pa.table(
        {"day": days, "writer": [writer] * n, "n": rng.integers(0, 2**40, n), "payload": _notes(rng, n)},
        schema=EVENTS,
    )


def cdc_rows(rng: np.random.Generator) -> pa.Table:
    """Change events out of order: sequences drawn from a wide range, so late and early events mix; a
    delete carries its sequence (and no values)."""
    n = int(rng.integers(1, 40))
    ids = rng.integers(0, KEYS, n).astype(np.int64)  # duplicates inside a batch too
    lsn = rng.integers(0, 10**9, n).astype(np.int64)
    op = np.array(["I", "U", "D"])[rng.choice(3, n, p=[0.3, 0.5, 0.2])]
    deleting = op == "D"
    names = np.array(_notes(rng, n), dtype=object)
    qty = rng.integers(0, 100, n)
    return pa.table(
        {
            "id": ids,
            "lsn": lsn,
            "name": pa.array(np.where(deleting, None, names).tolist(), pa.string()),
            "qty": pa.array(qty, mask=deleting),
            "op": op.tolist(),
        }
    )


# -- running: an operation against mere -------------------------------------------------------------


def run(cat: mere.Catalog, step: dict[str, Any], key: str) -> tuple[int, bool, bool]:
    """Run one operation with idempotency key ``key``: (version, already_committed, no_change)."""
    t = cat.table(f"{NAMESPACE}.{step['table']}")
    rng = _rng(step)
    op = step["op"]
    table = step["table"]
    if table == "accounts":
        if op == "upsert":
            r = t.upsert(account_rows(rng), idempotency_key=key)
        elif op == "delete_keys":
            r = t.delete(pa.table({"id": _ids(rng, int(rng.integers(1, 10)))}), idempotency_key=key)
        elif op == "delete_where":
            r = t.delete(f"id >= {step['lo']} AND id < {step['hi']} AND v < 500", idempotency_key=key)
        elif op == "update":
            r = t.update({"v": "v + 1"}, f"id >= {step['lo']} AND id < {step['hi']}", idempotency_key=key)
        elif op == "merge":
            m = (
                t.merge(account_rows(rng))
                .when_matched_update(set={"v": "s.v", "note": "s.note"})
                .when_not_matched_insert_all()
                .execute(idempotency_key=key)
            )
            return m.version, m.already_committed, (m.inserted + m.updated + m.deleted) == 0
        elif op == "transaction":
            tx = t.transaction(idempotency_key=key)
            try:
                tx.upsert(account_rows(rng))
                tx.delete(pa.table({"id": _ids(rng, int(rng.integers(1, 5)))}))
                r = tx.commit()
            except BaseException:
                tx.abort()
                raise
        else:
            raise AssertionError(op)
    elif table == "orders":
        if op == "upsert":
            r = t.upsert(order_rows(rng), idempotency_key=key)
        elif op == "overwrite_partition":
            r = t.overwrite(
                order_rows(rng, step["part"]), partition={"region": step["part"]}, idempotency_key=key
            )
        elif op == "delete_where":
            r = t.delete(f"id >= {step['lo']} AND id < {step['hi']}", idempotency_key=key)
        else:
            raise AssertionError(op)
    elif table == "events":
        if op == "append":
            r = t.append(event_rows(rng, step["writer"]), idempotency_key=key)
        elif op == "overwrite_partition":
            r = t.overwrite(
                event_rows(rng, step["writer"], step["part"]),
                partition={"day": step["part"]},
                idempotency_key=key,
            )
        else:
            raise AssertionError(op)
    elif table == "cdc":
        r = t.upsert(cdc_rows(rng), idempotency_key=key)
    else:
        raise AssertionError(table)
    return r.version, r.already_committed, r.no_change


# -- the model --------------------------------------------------------------------------------------


class Model:
    """What each table holds, replayed from operations in version order."""

    def __init__(self) -> None:
        self.accounts: dict[int, tuple[int, int, str]] = {}
        self.orders: dict[tuple[str, int], tuple[int, str]] = {}
        self.events: dict[str, Counter[tuple[str, int, str]]] = {d: Counter() for d in DAYS}
        self.cdc: dict[int, tuple[int, bool, str | None, int | None]] = {}  # id -> (lsn, deleted, name, qty)

    def apply(self, step: dict[str, Any]) -> None:
        """Apply one operation, as mere's semantics define it."""
        rng = _rng(step)
        op, table = step["op"], step["table"]
        if table == "accounts":
            a = self.accounts
            if op == "upsert":
                self._upsert_accounts(account_rows(rng))
            elif op == "delete_keys":
                for k in _ids(rng, int(rng.integers(1, 10))).tolist():
                    a.pop(k, None)
            elif op == "delete_where":
                for k in [k for k, row in a.items() if step["lo"] <= k < step["hi"] and row[0] < 500]:
                    del a[k]
            elif op == "update":
                for k in [k for k in a if step["lo"] <= k < step["hi"]]:
                    v, total, note = a[k]
                    a[k] = (v + 1, total, note)
            elif op == "merge":
                src = account_rows(rng)
                for k, v, total, note in zip(*(src.column(c).to_pylist() for c in ACCOUNTS.names)):
                    a[k] = (v, a[k][1], note) if k in a else (v, total, note)
            elif op == "transaction":
                self._upsert_accounts(account_rows(rng))
                for k in _ids(rng, int(rng.integers(1, 5))).tolist():
                    a.pop(k, None)
        elif table == "orders":
            o = self.orders
            if op == "upsert":
                rows = order_rows(rng)
            elif op == "overwrite_partition":
                rows = order_rows(rng, step["part"])
                for k in [k for k in o if k[0] == step["part"]]:
                    del o[k]
            else:
                for k in [k for k in o if step["lo"] <= k[1] < step["hi"]]:
                    del o[k]
                return
            for r, k, amount, status in zip(*(rows.column(c).to_pylist() for c in ORDERS.names)):
                o[(r, k)] = (amount, status)
        elif table == "events":
            if op == "append":
                rows = event_rows(rng, step["writer"])
            else:
                rows = event_rows(rng, step["writer"], step["part"])
                self.events[step["part"]] = Counter()
            for d, w, n, p in zip(*(rows.column(c).to_pylist() for c in EVENTS.names)):
                self.events[d][(w, n, p)] += 1
        elif table == "cdc":
            rows = cdc_rows(rng)
            for k, lsn, name, qty, kind in zip(*(rows.column(c).to_pylist() for c in rows.column_names)):
                held = self.cdc.get(k)
                if held is None or lsn >= held[0]:  # equal sequences: the later row wins
                    self.cdc[k] = (lsn, kind == "D", name, qty)

    def _upsert_accounts(self, rows: pa.Table) -> None:
        a = self.accounts
        for k, v, total, note in zip(*(rows.column(c).to_pylist() for c in ACCOUNTS.names)):
            a[k] = (v, a[k][1] + total if k in a else total, note)

    def rows(self, table: str) -> list[tuple[Any, ...]]:
        """The table's rows, as sorted tuples in schema order."""
        if table == "accounts":
            out: list[tuple[Any, ...]] = [(k, *r) for k, r in self.accounts.items()]
        elif table == "orders":
            out = [(*k, *r) for k, r in self.orders.items()]
        elif table == "events":
            out = [(d, *row) for d, c in self.events.items() for row, n in c.items() for _ in range(n)]
        else:
            out = [(k, lsn, name, qty) for k, (lsn, deleted, name, qty) in self.cdc.items() if not deleted]
        return sorted(out, key=_sort_key)

    def digest(self, table: str) -> str:
        return digest_rows(self.rows(table))


def _sort_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((x is None, x if x is not None else 0) for x in row)


def table_rows(data: pa.Table, table: str) -> list[tuple[Any, ...]]:
    """A read's rows as sorted tuples in the model's column order."""
    names = {"accounts": ACCOUNTS, "orders": ORDERS, "events": EVENTS, "cdc": CDC}[table].names
    columns = [data.column(c).to_pylist() for c in names]
    return sorted(zip(*columns), key=_sort_key)


def digest_rows(rows: list[tuple[Any, ...]]) -> str:
    return hashlib.sha1(json.dumps(rows, default=str).encode()).hexdigest()[:16]
