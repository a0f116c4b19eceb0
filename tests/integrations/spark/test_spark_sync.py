"""sync_database through Spark Structured Streaming: envelopes parsed in the JVM equal the Python reference
parse, micro-batches land as one catalog transaction each, a restart from the checkpoint changes nothing,
and a bad event stops the stream with nothing of its batch committed (or goes to quarantine)."""

from __future__ import annotations

import json
import os
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

import mere
from cdc_render import debezium_key, debezium_line, wal2json_line
from mere.integrations.cdc_sync import EVENT_SCHEMA, SyncOptions, events_from_json, plan_batch
from mere.integrations.spark import parse_events, sync_database

TYPES = {
    "orders": (
        {"id": "integer", "who": "text", "amt": "numeric(10,2)", "day": "date", "raw": "bytea"},
        ["id"],
    ),
    "lines": ({"id": "bigint", "order_id": "integer", "qty": "double precision", "ok": "boolean"}, ["id"]),
}


def _rows(n: int, shift: int = 0) -> list[tuple[str, str, Any, Any]]:
    import datetime as dt

    out: list[tuple[str, str, Any, Any]] = []
    for i in range(n):
        order = {
            "id": i,
            "who": f"o'{i}\n",
            "amt": Decimal(i + shift).scaleb(-2),
            "day": dt.date(2001, 1, 1 + i % 28),
            "raw": bytes([i % 256, 0]),
        }
        out.append(("orders", "c", None, order))
        out.append(
            ("lines", "c", None, {"id": 10 * i, "order_id": i, "qty": i / 7 + shift, "ok": i % 2 == 0})
        )
    return out


def _land(folder: Path, name: str, lines: list[str], keys: list[str | None] | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    order = len(list(folder.iterdir()))
    with open(folder / name, "w") as f:
        for i, line in enumerate(lines):
            f.write(json.dumps({"value": line, "key": None if keys is None else keys[i]}) + "\n")
    # Spark takes files in modification-time order: one file per micro-batch, in landing order
    os.utime(folder / name, ns=(time.time_ns(), 1_700_000_000_000_000_000 + order * 1_000_000_000))


def _stream(spark: SparkSession, folder: Path) -> Any:
    return (
        spark.readStream.schema("value string, key string").option("maxFilesPerTrigger", 1).json(str(folder))
    )


def _model(events: list[tuple[str, str, Any, Any]]) -> dict[str, dict[Any, Any]]:
    out: dict[str, dict[Any, Any]] = {t: {} for t in TYPES}
    for table, op, before, after in events:
        key = TYPES[table][1][0]
        if op == "d":
            out[table].pop(before[key], None)
        else:
            out[table][after[key]] = after
    return out


def _read(cat: mere.Catalog, ns: str) -> dict[str, dict[Any, Any]]:
    out = {}
    for t in TYPES:
        rows = cat.table(f"{ns}.{t}").to_arrow().drop_columns(["_cdc_lsn"]).to_pylist()
        out[t] = {r[TYPES[t][1][0]]: r for r in rows}
    return out


def _typed(cat: mere.Catalog, events: Any) -> dict[str, Any]:
    plan = plan_batch(cat, events, SyncOptions("x"))
    return {p.name: p.rows.to_pylist() for p in plan.tables}


def test_spark_parse_equals_the_python_reference(spark: SparkSession, tmp_path: Path) -> None:
    dbz, keys, w2j = [], [], []
    for lsn, (table, op, before, after) in enumerate(_rows(3), start=1):
        types, key = TYPES[table]
        dbz.append(debezium_line("public", table, op, before, after, lsn, types, wrapped=lsn % 2 == 0))
        keys.append(debezium_key(after, key))
        w2j.append(wal2json_line("public", table, "I", before, after, lsn, types, key))
    # transaction boundaries: Debezium's metadata events and transaction blocks, wal2json's B/C with xid
    from test_cdc_sync import _with_boundaries

    dbz_tx = _with_boundaries("debezium", 9, list(zip(dbz[:2], keys[:2], strict=True)))
    dbz += [line for line, _ in dbz_tx]
    keys += [key for _, key in dbz_tx]
    w2j += [line for line, _ in _with_boundaries("wal2json", 9, [(w2j[0], None), (w2j[1], None)])]
    dbz.append("not json")
    keys.append(None)
    dbz += [None, "null"]  # Kafka tombstones (a null value after a delete), skipped by both parsers
    keys += [keys[0], None]
    df = spark.createDataFrame(list(zip(dbz, keys)), "value string, key string")
    got = parse_events(df, "debezium").toArrow().cast(EVENT_SCHEMA).to_pylist()
    assert got == events_from_json(dbz, "debezium", keys).to_pylist()
    df = spark.createDataFrame([(line,) for line in w2j], "value string")
    got = parse_events(df, "wal2json").toArrow().cast(EVENT_SCHEMA)
    # Spark writes bare JSON numbers through a double (0.00 -> "0.0"): equal once typed
    cat = mere.connect(str(tmp_path / "wh"))
    assert _typed(cat, got) == _typed(cat, events_from_json(w2j, "wal2json"))
    reference = events_from_json(w2j, "wal2json")
    for column in ("op", "txn", "table"):
        assert got.column(column).to_pylist() == reference.column(column).to_pylist(), column


def test_spark_parse_keeps_numbers_exact(spark: SparkSession, tmp_path: Path) -> None:
    from test_cdc_sync import EDGE_DECIMALS, EDGE_IDS, _binary_decimal_line, _unscaled

    types = {"id": "bigint", "amt": "numeric(38,10)", "x": "double precision"}
    rows = [
        {"id": i, "amt": Decimal(d), "x": 0.1 + n}
        for n, (i, d) in enumerate(zip(EDGE_IDS, EDGE_DECIMALS, strict=True))
    ]
    w2j = [wal2json_line("public", "w", "I", None, r, n + 1, types, ["id"]) for n, r in enumerate(rows)]
    w2j.append(w2j[0].replace('"value":', '"value" : '))  # spacing wal2json may write
    parameters = {"scale": "10", "connect.decimal.precision": "38"}
    dbz = [
        _binary_decimal_line("d", n + 1, {"id": r["id"], "amt": _unscaled(str(r["amt"]), 10)}, parameters)
        for n, r in enumerate(rows)
    ]
    keys = [json.dumps({"id": r["id"]}) for r in rows]
    cat = mere.connect(str(tmp_path / "wh"))
    want = {r["id"]: r["amt"] for r in rows}
    for fmt, lines, k in (("wal2json", w2j, None), ("debezium", dbz, keys)):
        df = spark.createDataFrame(
            [(line, None if k is None else k[i]) for i, line in enumerate(lines)], "value string, key string"
        )
        got = parse_events(df, fmt).toArrow().cast(EVENT_SCHEMA)
        assert _typed(cat, got) == _typed(cat, events_from_json(lines, fmt, k)), fmt
        (plan,) = plan_batch(cat, got, SyncOptions("x")).tables
        assert {r["id"]: r["amt"] for r in plan.rows.to_pylist()} == want, fmt
    # a text value holding the pattern is left as it is
    tricky = wal2json_line(
        "public", "t", "I", None, {"id": 1, "s": 'x"value":12'}, 1, {"id": "bigint", "s": "text"}, ["id"]
    )
    got = (
        parse_events(spark.createDataFrame([(tricky,)], "value string"), "wal2json")
        .toArrow()
        .cast(EVENT_SCHEMA)
    )
    assert got.to_pylist() == events_from_json([tricky], "wal2json").to_pylist()


def _run(spark: SparkSession, folder: Path, wh: str, chk: Path, fmt: str = "wal2json", **options: Any) -> Any:
    query = sync_database(
        _stream(spark, folder),
        warehouse=wh,
        namespace="shop",
        format=fmt,
        checkpoint_location=str(chk),
        trigger={"availableNow": True},
        **options,
    )
    query.awaitTermination()
    return query


def test_micro_batches_land_whole_and_a_restart_changes_nothing(spark: SparkSession, tmp_path: Path) -> None:
    wh, land, chk = str(tmp_path / "wh"), tmp_path / "land", tmp_path / "chk"
    events = _rows(6)
    events += [
        ("orders", "u", events[0][3], {**events[0][3], "who": "changed"}),
        ("lines", "d", events[1][3], None),
    ]
    lsn = {id(e): i + 1 for i, e in enumerate(events)}
    files = [events[:5], events[5:9], events[9:]]
    for n, part in enumerate(files):
        lines = [
            wal2json_line(
                "public", t, {"c": "I", "u": "U", "d": "D"}[op], b, a, lsn[id(e)], TYPES[t][0], TYPES[t][1]
            )
            for e in part
            for (t, op, b, a) in [e]
        ]
        _land(land, f"part-{n}.json", list(reversed(lines)))  # out of order inside a micro-batch
    query = _run(spark, land, wh, chk, buckets=2)
    assert query.exception() is None
    cat = mere.connect(wh)
    assert _read(cat, "shop") == _model(events)
    versions = cat.snapshot().versions
    # one catalog transaction per micro-batch: the tables' commits share the batch's key
    times = {t: [s.committed_at for s in cat.table(f"shop.{t}").history()] for t in TYPES}
    assert times["orders"][-3:] == times["lines"][-3:]  # one catalog transaction per micro-batch
    qid = json.loads((chk / "metadata").read_text())["id"]
    for batch in range(3):
        tx = cat.transaction(f"mere-sync:{qid}:{batch}")
        assert tx.already_committed
        tx.abort()
    # a restart with the last commit marker removed: Spark replays the batch, mere changes nothing
    last = max(int(p.name) for p in (chk / "commits").iterdir() if p.name.isdigit())
    for marker in (str(last), f".{last}.crc"):
        (chk / "commits" / marker).unlink(missing_ok=True)
    _run(spark, land, wh, chk)
    assert cat.snapshot().versions == versions


def test_a_bad_event_stops_the_stream_with_its_batch_uncommitted(spark: SparkSession, tmp_path: Path) -> None:
    wh, land, chk = str(tmp_path / "wh"), tmp_path / "land", tmp_path / "chk"
    events = _rows(2)
    good = [
        debezium_line("public", t, op, b, a, i + 1, TYPES[t][0]) for i, (t, op, b, a) in enumerate(events)
    ]
    keys = [debezium_key(a, TYPES[t][1]) for t, _, _, a in events]
    _land(land, "part-0.json", good, keys)
    odd = json.loads(debezium_line("public", "orders", "c", None, events[0][3], 50, TYPES["orders"][0]))
    odd["payload"]["op"] = "z"
    later = debezium_line("public", "lines", "c", None, {**events[1][3], "id": 99}, 51, TYPES["lines"][0])
    _land(land, "part-1.json", [later, json.dumps(odd)], [json.dumps({"id": 99}), json.dumps({"id": 0})])
    query = sync_database(
        _stream(spark, land),
        warehouse=wh,
        namespace="shop",
        checkpoint_location=str(chk),
        trigger={"availableNow": True},
    )
    with pytest.raises(Exception, match="unknown op"):
        query.awaitTermination()
    cat = mere.connect(wh)
    before = cat.snapshot().versions
    assert 99 not in {r["id"] for r in cat.table("shop.lines").to_arrow().to_pylist()}
    assert before == {"shop.lines": 1, "shop.orders": 1}
    # the same stream with quarantine: the good event lands, the bad one is kept
    _run(spark, land, wh, chk, fmt="debezium", on_error="quarantine")
    assert 99 in {r["id"] for r in cat.table("shop.lines").to_arrow().to_pylist()}
    kept = cat.table("shop.cdc_quarantine").to_arrow().to_pylist()
    assert [r["reason"] for r in kept] == ["unknown op"] and kept[0]["event"] == json.dumps(odd)


def test_spark_parse_takes_a_type_from_the_old_image_when_the_new_one_lacks_the_column(
    spark: SparkSession, tmp_path: Path
) -> None:
    # REPLICA IDENTITY FULL: an UPDATE that left a TOASTed column unchanged logs it in the old image only
    def column(name: str, kind: str, value: Any) -> dict[str, Any]:
        return {"name": name, "type": kind, "value": value}

    update = {
        "action": "U",
        "schema": "public",
        "table": "docs",
        "lsn": "0/20",
        "xid": 7,
        "pk": [{"name": "id", "type": "integer"}],
        "columns": [column("id", "integer", 1), column("n", "integer", 2)],
        "identity": [column("id", "integer", 1), column("n", "integer", 1), column("body", "text", "long")],
    }
    delete = {**update, "action": "D", "lsn": "0/21", "columns": None}
    insert = {**update, "action": "I", "lsn": "0/22", "identity": None}
    lines = [json.dumps(r) for r in (update, delete, insert)]
    got = parse_events(spark.createDataFrame([(x,) for x in lines], "value string"), "wal2json")
    events = got.toArrow().cast(EVENT_SCHEMA)
    got_types = [dict(m) for m in events.column("types").to_pylist()]
    want = [dict(m) for m in events_from_json(lines, "wal2json").column("types").to_pylist()]
    assert got_types == want
    assert want[0] == {"id": "integer", "n": "integer", "body": "text"}
    cat = mere.connect(str(tmp_path / "wh"))
    rows = _typed(cat, events)["x.docs"]
    assert rows[0]["body"] == "long" and rows[0]["n"] == 2  # the old image's unchanged value
