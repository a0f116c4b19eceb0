"""The whole-database sync's core fed by a real PostgreSQL's logical decoding, without Spark.

Unchanged TOASTed values: PostgreSQL does not log a TOASTed value an UPDATE leaves as it was (test_decoding
prints ``unchanged-toast-datum``, wal2json leaves the column out, Debezium writes its placeholder); the
synced row must keep the value it had. The source table stores a large text column out of line
(``SET STORAGE EXTERNAL``) under ``REPLICA IDENTITY DEFAULT`` (old images hold the key only), and
updates of other columns, of the text itself, and of the key run in random batches; at the end the
synced table equals ``SELECT *``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mere
from cdc_render import render_change
from cdc_source import DOCS, DOCS_TYPES, LOGICAL_SETTINGS, ChangeSource, Event, diff_models
from mere.integrations.cdc_sync import SyncOptions, events_from_json, sync_batch
from services import PostgresServer

pytestmark = pytest.mark.postgres

TYPES = DOCS_TYPES


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    with PostgresServer(settings=LOGICAL_SETTINGS) as pg:
        yield pg


def _big(rng: random.Random) -> str:
    # random (incompressible) text over 2 kB: stored out of line, in TOAST
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(rng.randint(2100, 4000)))


def _render(event: Event, fmt: str) -> tuple[str, str | None]:
    return render_change(event.op, event.before, event.after, event.lsn, fmt, "docs", TYPES, ["id"])


@pytest.mark.parametrize("fmt", ["wal2json", "debezium"])
def test_unchanged_toast_values_keep_the_synced_value(
    server: PostgresServer, tmp_path: Path, fmt: str
) -> None:
    rng = random.Random(34)
    with ChangeSource((DOCS,), server=server) as src:
        with src.connect(autocommit=True) as conn:
            conn.execute("ALTER TABLE docs REPLICA IDENTITY DEFAULT")
            conn.execute("ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL")
        ids = list(range(1, 13))
        with src.connect() as conn:
            for i in ids:
                conn.execute(
                    "INSERT INTO docs VALUES (%s, %s, %s, %s)", [i, 0, _big(rng) if i % 4 else None, "t"]
                )
            conn.commit()
            for step in range(60):
                i = rng.choice(ids)
                kind = rng.choice(["n", "n", "n", "tag", "body", "key"])
                if kind == "n":  # the TOASTed body is not logged
                    conn.execute("UPDATE docs SET n = n + 1 WHERE id = %s", [i])
                elif kind == "tag":
                    conn.execute("UPDATE docs SET tag = %s WHERE id = %s", [f"t{step}", i])
                elif kind == "body":
                    conn.execute("UPDATE docs SET body = %s WHERE id = %s", [_big(rng), i])
                else:  # a key change keeps the TOAST pointer: the new row's body is not logged either
                    new = max(ids) + 1
                    conn.execute("UPDATE docs SET id = %s WHERE id = %s", [new, i])
                    ids[ids.index(i)] = new
                if rng.random() < 0.4:
                    conn.commit()
            conn.commit()
        events = src.changes(keep_unchanged=True)
        oracle = src.expected_model("docs")
    partial = [e for e in events if e.op == "update" and "body" not in (e.after or {})]
    assert len(partial) > 20, "the workload must update rows without logging their TOASTed body"
    assert any(e.key_changed for e in partial)

    cat = mere.connect(str(tmp_path / "wh"))
    options = SyncOptions("src", buckets=2)
    lines = [_render(e, fmt) for e in events]
    cuts = sorted(rng.sample(range(1, len(lines)), 5))
    unresolved = 0
    for n, (lo, hi) in enumerate(zip([0, *cuts], [*cuts, len(lines)], strict=True)):
        part = lines[lo:hi]
        part = part + [rng.choice(part) for _ in range(len(part) // 5)]  # duplicates
        rng.shuffle(part)  # out of order inside a batch
        batch = events_from_json(
            [p for p, _ in part], fmt, [k for _, k in part] if fmt == "debezium" else None
        )
        unresolved += sync_batch(cat, batch, options, f"b{n}").unresolved
    rows = cat.table("src.docs").to_arrow().drop_columns(["_cdc_lsn"]).to_pylist()
    got: dict[Any, Any] = {(r["id"],): r for r in rows}
    assert diff_models(got, oracle) == []
    assert unresolved == 0
    assert sum(1 for r in rows if r["body"] is not None and len(r["body"]) > 2000) >= 6
