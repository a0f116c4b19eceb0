"""Makes tests/data/catalog_format2: a warehouse and catalog written by mere before catalog versioning.

Run once with the mere of commit 2ed63ed (catalog format 2: no version row); kept for provenance. The
upgrade test opens the result with the current mere, on SQLite and (from the dumped rows) PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sys

import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

import mere
from mere.catalog import sql as catalog_sql

out = sys.argv[1]
shutil.rmtree(out, ignore_errors=True)
cat = mere.connect(os.path.join(out, "warehouse"))
orders = cat.create_table(
    "sales.orders",
    pa.schema(
        [
            ("id", pa.int64()),
            ("day", pa.date32()),
            ("qty", pa.int64()),
            ("note", pa.string()),
            ("tags", pa.list_(pa.string())),
        ]
    ),
    primary_key="id",
    partition_by="day",
    buckets=2,
    merge_operators={"qty": "sum"},
    properties={"write.compression": "zstd", "owner": "sales-team"},
)
d1, d2 = dt.date(2026, 11, 20), dt.date(2026, 11, 21)
orders.upsert(
    pa.table(
        {
            "id": [1, 2, 3, 4],
            "day": [d1, d1, d2, d2],
            "qty": [1, 2, 3, 4],
            "note": ["a", "b", "c", "d"],
            "tags": [["x"], [], None, ["y", "z"]],
        }
    )
)
orders.upsert(pa.table({"id": [1, 3], "day": [d1, d2], "qty": [10, 30]}))
orders.delete("id = 2")
orders.compact()
orders.upsert(pa.table({"id": [5], "day": [d2], "qty": [5], "note": ["e"], "tags": [["w"]]}))
events = cat.create_table("logs.events", pa.schema([("ts", pa.int64()), ("msg", pa.string())]))
events.append(pa.table({"ts": [1, 2, 3], "msg": ["start", "tick", "stop"]}))
events.delete("msg = 'tick'")

expected = {}
for t in (orders, events):
    expected[t.name] = {
        str(v): sorted(
            t.scan(version=v).to_arrow().to_pylist(), key=lambda r: json.dumps(r, default=str, sort_keys=True)
        )
        for v in range(t.version + 1)
    }
with open(os.path.join(out, "expected.json"), "w") as f:
    json.dump(expected, f, default=str, indent=1, sort_keys=True)

# The same catalog for PostgreSQL: the DDL this mere issues there, and every row.
engine = sa.create_engine(cat.sql.url)
with engine.connect() as conn, open(os.path.join(out, "postgresql.json"), "w") as f:
    ddl = [
        str(sa.schema.CreateTable(t).compile(dialect=postgresql.dialect())).strip()
        for t in catalog_sql._metadata.sorted_tables
    ]
    ddl += [
        str(sa.schema.CreateIndex(i).compile(dialect=postgresql.dialect())).strip()
        for t in catalog_sql._metadata.sorted_tables
        for i in t.indexes
    ]
    rows = {
        t.name: [dict(r._mapping) for r in conn.execute(sa.select(t))]
        for t in catalog_sql._metadata.sorted_tables
    }
    json.dump({"ddl": ddl, "rows": rows}, f, indent=1, sort_keys=True)
print("made", out, {k: len(v) for k, v in expected.items()})
