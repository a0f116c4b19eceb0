"""A whole PostgreSQL database synced through Spark Structured Streaming with ``sync_database``, the
driver SIGKILLed mid-stream and restarted from its checkpoint.

The source: three related tables (``customers`` <- ``orders`` <- ``lines``, foreign keys with ON DELETE
CASCADE) under random multi-table transactions (new customers with orders and lines, new orders, updates,
deletes that cascade, rolled-back transactions), and ``ALTER TABLE ... ADD COLUMN`` on two tables
halfway. Its logical decoding (test_decoding, parsed by ``tests/cdc_source.py``) is rendered as wal2json
``format-version`` 2 records (the change's own LSN, PostgreSQL's type names, the full old row as identity:
``REPLICA IDENTITY FULL``) and landed as JSON-lines files of whole transactions, events shuffled and
duplicated inside a file, some files landed again later (at-least-once delivery). A separate process runs
the stream (``maxFilesPerTrigger``); it is SIGKILLed (driver, JVM and workers) once mere has committed two
micro-batches, with Spark's marker of the last one removed so that the restart replays it, and restarted
from the checkpoint to drain the files.

At the end every mere table equals PostgreSQL's ``SELECT *``; and at every commit time of the synced
tables a ``cat.snapshot(as_of=...)`` read satisfies the source's foreign keys (a source transaction's
rows never appear partly, every table at one transaction boundary).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

import mere
from cdc_render import wal2json_line
from cdc_source import LOGICAL_SETTINGS, ChangeSource, Column, Event, TableSpec, diff_models, random_value
from services import PostgresServer

pytestmark = pytest.mark.postgres

SEED = 34
TRANSACTIONS = (35, 35)  # before and after the ALTER TABLEs
FILES_PER_TRIGGER = 2
RUN_TIMEOUT_S = 600
NAMESPACE = "shop"
KILL_TRANSACTIONS = 30
KILLS = 2

CUSTOMERS = TableSpec(
    "customers",
    (Column("id", "integer", False), Column("name", "text"), Column("since", "date")),
    key=("id",),
)
ORDERS = TableSpec(
    "orders",
    (
        Column("id", "integer", False),
        Column("customer_id", "integer", False),
        Column("amount", "numeric(12,3)"),
        Column("at", "timestamp with time zone"),
    ),
    key=("id",),
)
LINES = TableSpec(
    "lines",
    (
        Column("id", "bigint", False),
        Column("order_id", "integer", False),
        Column("qty", "integer"),
        Column("price", "double precision"),
        Column("blob", "bytea"),
    ),
    key=("id",),
)
ADDED = {"orders": Column("note", "text"), "lines": Column("discount", "numeric(6,2)")}


def with_added(spec: TableSpec) -> TableSpec:
    return TableSpec(spec.name, (*spec.columns, ADDED[spec.name]), spec.key) if spec.name in ADDED else spec


# -- the streaming job (its own process: `python this_file.py CONFIG_JSON`) ---------------------------


def stream_job(config: dict[str, Any]) -> None:
    from mere.integrations.spark import local_session, sync_database

    spark = local_session("mere-sync-postgres")
    stream = spark.readStream.option("maxFilesPerTrigger", FILES_PER_TRIGGER).text(config["landing"])
    query = sync_database(
        stream,
        warehouse=config["warehouse"],
        catalog=config["catalog"],
        namespace=NAMESPACE,
        format="wal2json",
        checkpoint_location=config["checkpoint"],
        trigger={"availableNow": True},
        buckets=2,
        properties={"compaction.min-files": "3"},  # automatic compactions run inside the sync
    )
    query.awaitTermination()
    spark.stop()


class StreamProcess:
    """The streaming job in a child process; ``kill`` SIGKILLs it and every process under it."""

    def __init__(self, config: dict[str, Any], log: Path) -> None:
        paths = [str(Path(mere.__file__).parents[1]), str(Path(__file__).parents[2])]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")])}
        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, __file__, json.dumps(config)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill(self) -> None:
        victims: list[psutil.Process] = []
        with contextlib.suppress(psutil.NoSuchProcess):
            root = psutil.Process(self.proc.pid)
            victims = [root, *root.children(recursive=True)]
        for p in victims:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.send_signal(signal.SIGKILL)
        psutil.wait_procs(victims, timeout=30)
        self.proc.wait(timeout=30)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the stream did not finish in {timeout}s:\n{self.tail()}") from None

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def committed_batches(cat: mere.Catalog, checkpoint: Path) -> int:
    """How many micro-batches the sync committed (one catalog transaction each, in batch order)."""
    try:
        qid = json.loads((checkpoint / "metadata").read_text())["id"]
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return 0
    n = 0
    while True:
        tx = cat.transaction(f"mere-sync:{qid}:{n}")
        landed = tx.already_committed
        tx.abort()
        if not landed:
            return n
        n += 1


# -- the source workload ------------------------------------------------------------------------------


class Workload:
    """Random multi-table transactions that keep the foreign keys (one connection: serial transactions)."""

    def __init__(self, src: ChangeSource, rng: random.Random) -> None:
        self.src, self.rng = src, rng
        self.next_id = 1
        self.kinds: dict[str, int] = {}

    def fresh(self) -> int:
        self.next_id += 1
        return self.next_id

    def value(self, spec: TableSpec, name: str) -> Any:
        col = spec.column(name)
        if col.base_type == "double precision":
            return (
                None
                if self.rng.random() < 0.1
                else round(self.rng.uniform(-1e4, 1e4), self.rng.randint(0, 6))
            )
        return random_value(col, self.rng, toast=0.0)

    def insert(self, conn: Any, spec: TableSpec, row: dict[str, Any]) -> None:
        names = [c.name for c in spec.columns if c.name in row]
        cols = ", ".join(f'"{n}"' for n in names)
        conn.execute(
            f"INSERT INTO {spec.name} ({cols}) VALUES ({', '.join(['%s'] * len(names))})",
            [row[n] for n in names],
        )

    def row(self, spec: TableSpec, **fixed: Any) -> dict[str, Any]:
        out = {c.name: self.value(spec, c.name) for c in spec.columns if c.name not in spec.key}
        out.update(fixed)
        return out

    def ids(self, conn: Any, table: str) -> list[int]:
        return [r[0] for r in conn.execute(f"SELECT id FROM {table} ORDER BY id")]

    def new_order(self, conn: Any, customer: int) -> None:
        order = self.fresh()
        self.insert(conn, self.spec("orders"), self.row(self.spec("orders"), id=order, customer_id=customer))
        for _ in range(self.rng.randint(1, 3)):
            self.insert(
                conn, self.spec("lines"), self.row(self.spec("lines"), id=self.fresh(), order_id=order)
            )

    def spec(self, name: str) -> TableSpec:
        return self.src.tables[name]

    def transaction(self, conn: Any) -> None:
        for _ in range(self.rng.randint(1, 4)):
            customers, orders = self.ids(conn, "customers"), self.ids(conn, "orders")
            kind = self.rng.choice(
                [
                    "customer",
                    "customer",
                    "order",
                    "update",
                    "update",
                    "delete-order",
                    "delete-customer",
                    "lines",
                ]
            )
            if kind != "customer" and not customers:
                kind = "customer"
            self.kinds[kind] = self.kinds.get(kind, 0) + 1
            if kind == "customer":
                cid = self.fresh()
                self.insert(conn, CUSTOMERS, self.row(CUSTOMERS, id=cid))
                for _ in range(self.rng.randint(0, 2)):
                    self.new_order(conn, cid)
            elif kind == "order":
                self.new_order(conn, self.rng.choice(customers))
            elif kind == "lines" and orders:
                order = self.rng.choice(orders)
                self.insert(
                    conn, self.spec("lines"), self.row(self.spec("lines"), id=self.fresh(), order_id=order)
                )
            elif kind == "update":
                table = self.rng.choice(["customers", "orders", "lines"])
                spec = self.spec(table)
                target = self.rng.choice(self.ids(conn, table) or [0])
                name = self.rng.choice(
                    [c.name for c in spec.columns if c.name not in ("id", "customer_id", "order_id")]
                )
                conn.execute(
                    f'UPDATE {table} SET "{name}" = %s WHERE id = %s', [self.value(spec, name), target]
                )
            elif kind == "delete-order" and orders:
                conn.execute(
                    "DELETE FROM orders WHERE id = %s", [self.rng.choice(orders)]
                )  # cascades to lines
            elif kind == "delete-customer":
                conn.execute("DELETE FROM customers WHERE id = %s", [self.rng.choice(customers)])
        if self.rng.random() < 0.1:
            conn.rollback()
        else:
            conn.commit()

    def run(self, transactions: int) -> None:
        with self.src.connect() as conn:
            conn.execute("SET synchronous_commit = on")
            conn.commit()
            for _ in range(transactions):
                self.transaction(conn)


# -- delivery -----------------------------------------------------------------------------------------


def rendered(event: Event, spec: TableSpec) -> str:
    types = {c.name: c.pg_type for c in spec.columns}
    action = {"insert": "I", "update": "U", "delete": "D"}[event.op]
    return wal2json_line("public", event.table, action, event.before, event.after, event.lsn, types, spec.key)


def land(
    events: list[Event], specs: dict[str, TableSpec], landing: Path, rng: random.Random, first: int
) -> int:
    """Whole transactions in commit order, 1-5 per file, shuffled and partly duplicated inside a file; a
    few files land again later. Returns the next file number."""
    by_tx: dict[int, list[Event]] = {}
    for e in events:
        by_tx.setdefault(e.commit_lsn, []).append(e)
    transactions = [by_tx[k] for k in sorted(by_tx)]
    files: list[list[str]] = []
    i = 0
    while i < len(transactions):
        n = rng.randint(1, 5)
        lines = [rendered(e, specs[e.table]) for tx in transactions[i : i + n] for e in tx]
        lines += [rng.choice(lines) for _ in range(len(lines) // 6)]
        rng.shuffle(lines)
        files.append(lines)
        i += n
    return land_files(files, landing, rng, first, replays=len(files) // 4)


def land_cut(
    events: list[Event], specs: dict[str, TableSpec], landing: Path, rng: random.Random, first: int
) -> int:
    """The stream with its transaction boundaries (wal2json ``B``/``C`` records, every change with its
    ``xid``), cut into files at random lines: transactions span files. Lines are shuffled inside a file
    and a few files land again later. Returns the next file number."""
    by_tx: dict[int, list[Event]] = {}
    for e in events:
        by_tx.setdefault(e.commit_lsn, []).append(e)
    lines: list[str] = []
    for commit in sorted(by_tx):
        xid = by_tx[commit][0].xid
        lines.append(json.dumps({"action": "B", "xid": xid}))
        lines += ["{" + f'"xid":{xid},' + rendered(e, specs[e.table])[1:] for e in by_tx[commit]]
        lines.append(
            json.dumps({"action": "C", "xid": xid, "lsn": f"{commit >> 32:X}/{commit & 0xFFFFFFFF:X}"})
        )
    files: list[list[str]] = []
    i = 0
    while i < len(lines):
        n = rng.randint(3, 30)
        part = lines[i : i + n]
        rng.shuffle(part)
        files.append(part)
        i += n
    return land_files(files, landing, rng, first, replays=len(files) // 5)


def land_files(files: list[list[str]], landing: Path, rng: random.Random, first: int, replays: int) -> int:
    """Write ``files`` (lists of lines) into ``landing`` in order, with ``replays`` earlier files landing
    again later (at-least-once delivery), each with a modification time that orders it. Returns the next
    file number."""
    for k in range(replays):
        at = rng.randrange(k + 1, len(files) + 1)
        files.insert(at, list(files[rng.randrange(at)]))
    number = first
    for lines in files:
        path = landing / f"part-{number:04d}.json"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, ns=(time.time_ns(), 1_700_000_000_000_000_000 + number * 1_000_000_000))
        number += 1
    return number


def check_foreign_keys(snap: Any) -> None:
    names = set(snap.tables())
    ids = {t: set() for t in ("customers", "orders", "lines")}
    refs: dict[str, list[int]] = {"orders": [], "lines": []}
    for t in ids:
        if f"{NAMESPACE}.{t}" not in names:
            continue
        rows = snap.table(f"{NAMESPACE}.{t}").to_arrow().to_pylist()
        ids[t] = {r["id"] for r in rows}
        if t == "orders":
            refs["orders"] = [r["customer_id"] for r in rows]
        if t == "lines":
            refs["lines"] = [r["order_id"] for r in rows]
    assert set(refs["orders"]) <= ids["customers"], (snap, set(refs["orders"]) - ids["customers"])
    assert set(refs["lines"]) <= ids["orders"], (snap, set(refs["lines"]) - ids["orders"])


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    with PostgresServer(settings=LOGICAL_SETTINGS) as pg:
        yield pg


def link_tables(src: ChangeSource) -> None:
    """The source's foreign keys: orders to customers, lines to orders (deletes cascade)."""
    with src.connect(autocommit=True) as conn:
        conn.execute(
            "ALTER TABLE orders ADD FOREIGN KEY (customer_id) REFERENCES customers(id) ON DELETE CASCADE"
        )
        conn.execute("ALTER TABLE lines ADD FOREIGN KEY (order_id) REFERENCES orders(id) ON DELETE CASCADE")


def test_a_postgres_database_synced_through_a_killed_spark_stream_lands_whole(
    server: PostgresServer, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    landing, checkpoint, wh = tmp_path / "landing", tmp_path / "checkpoint", tmp_path / "wh"
    landing.mkdir()
    with ChangeSource((CUSTOMERS, ORDERS, LINES), server=server) as src:
        link_tables(src)
        work = Workload(src, rng)
        work.run(TRANSACTIONS[0])
        first = src.changes(consume=True)
        specs_before = dict(src.tables)
        with src.connect(autocommit=True) as conn:  # mid-stream schema changes
            for table, column in ADDED.items():
                conn.execute(f'ALTER TABLE {table} ADD COLUMN "{column.name}" {column.pg_type}')
        src.tables = {name: with_added(spec) for name, spec in src.tables.items()}
        work.run(TRANSACTIONS[1])
        second = src.changes(consume=True)
        oracle = {name: src.expected_model(name) for name in src.tables}
        specs_after = dict(src.tables)
    assert work.kinds.get("delete-customer", 0) and work.kinds.get("delete-order", 0), work.kinds
    assert any(e.op == "delete" and e.table == "lines" for e in first + second)  # cascades decoded

    catalog = server.create_database(f"mere_sync_{os.getpid()}")
    cat = mere.connect(str(wh), catalog=catalog)
    config = {
        "landing": str(landing),
        "checkpoint": str(checkpoint),
        "warehouse": str(wh),
        "catalog": catalog,
    }
    number = land(first, specs_before, landing, rng, 0)
    job = StreamProcess(config, tmp_path / "stream.log")
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while committed_batches(cat, checkpoint) < 2:
            assert job.proc.poll() is None, f"the stream ended before the kill:\n{job.tail()}"
            assert time.monotonic() < deadline, f"no progress in {RUN_TIMEOUT_S}s:\n{job.tail()}"
            time.sleep(0.05)
    finally:
        job.kill()
    in_mere = committed_batches(cat, checkpoint)
    done = [int(p.name) for p in (checkpoint / "commits").glob("*") if p.name.isdigit()]
    in_spark = max(done) + 1 if done else 0
    assert in_spark <= in_mere
    if in_spark == in_mere:  # as if the kill had come between mere's commit and Spark's: a replay
        for marker in (str(in_mere - 1), f".{in_mere - 1}.crc"):
            (checkpoint / "commits" / marker).unlink(missing_ok=True)
    number = land(second, specs_after, landing, rng, number)
    job = StreamProcess(config, tmp_path / "stream.log")
    assert job.wait(RUN_TIMEOUT_S) == 0, job.tail()

    for name, spec in specs_after.items():
        rows = cat.table(f"{NAMESPACE}.{name}").to_arrow().drop_columns(["_cdc_lsn"]).to_pylist()
        got = {spec.key_of(r): r for r in rows}
        assert diff_models(got, oracle[name]) == [], name
    # every commit of the synced tables is a read point where the foreign keys hold
    times = sorted(
        {
            s.committed_at
            for t in specs_after
            for s in cat.table(f"{NAMESPACE}.{t}").history()
            if not s.expired
        }
    )
    assert len(times) >= committed_batches(cat, checkpoint) >= 4
    for at in times:
        check_foreign_keys(cat.snapshot(as_of=at))
    print(
        f"\nsync: {sum(TRANSACTIONS)} transactions, {len(first) + len(second)} events, {number} files, "
        f"{committed_batches(cat, checkpoint)} micro-batches, {len(times)} read points checked, kinds {work.kinds}"
    )


@pytest.mark.parametrize("catalog_kind", ["sqlite", "postgresql"])
def test_killed_at_random_points_with_transactions_across_files_lands_whole(
    server: PostgresServer, tmp_path: Path, catalog_kind: str
) -> None:
    """SIGKILL the Spark driver at random points (after a random number of committed micro-batches, then
    a random moment into the next one), several times, and restart from the checkpoint each time; the
    files cut source transactions anywhere, so only the held (pending) events keep them whole."""
    rng = random.Random(SEED + len(catalog_kind))
    landing, checkpoint, wh = tmp_path / "landing", tmp_path / "checkpoint", tmp_path / "wh"
    landing.mkdir()
    with ChangeSource((CUSTOMERS, ORDERS, LINES), server=server) as src:
        link_tables(src)
        Workload(src, rng).run(KILL_TRANSACTIONS)
        events = src.changes(consume=True)
        oracle = {name: src.expected_model(name) for name in src.tables}
        specs = dict(src.tables)
    catalog = None
    if catalog_kind == "postgresql":
        catalog = server.create_database(f"mere_kill_{os.getpid()}")
    cat = mere.connect(str(wh), catalog=catalog)
    config = {
        "landing": str(landing),
        "checkpoint": str(checkpoint),
        "warehouse": str(wh),
        "catalog": catalog,
    }
    files = land_cut(events, specs, landing, rng, 0)
    log = tmp_path / "stream.log"
    for _ in range(KILLS):
        job = StreamProcess(config, log)
        try:
            target = committed_batches(cat, checkpoint) + rng.randint(1, 2)
            deadline = time.monotonic() + RUN_TIMEOUT_S
            while committed_batches(cat, checkpoint) < target and job.proc.poll() is None:
                assert time.monotonic() < deadline, f"no progress in {RUN_TIMEOUT_S}s:\n{job.tail()}"
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 1.5))  # somewhere into the next micro-batch
        finally:
            job.kill()
    job = StreamProcess(config, log)
    assert job.wait(RUN_TIMEOUT_S) == 0, job.tail()

    for name, spec in specs.items():
        rows = cat.table(f"{NAMESPACE}.{name}").to_arrow().drop_columns(["_cdc_lsn"]).to_pylist()
        assert diff_models({spec.key_of(r): r for r in rows}, oracle[name]) == [], name
    # every commit is a read point where the source's foreign keys hold: no transaction shows partly
    times = sorted(
        {s.committed_at for t in specs for s in cat.table(f"{NAMESPACE}.{t}").history() if not s.expired}
    )
    batches = committed_batches(cat, checkpoint)
    assert len(times) >= 3 and batches >= 3
    for at in times:
        check_foreign_keys(cat.snapshot(as_of=at))
    # the sync's versions name the micro-batch that committed them (compactions commit on their own)
    keys = {s.idempotency_key for t in specs for s in cat.table(f"{NAMESPACE}.{t}").history()} - {None}
    assert keys and all(k.startswith("mere-sync:") for k in keys), keys
    print(
        f"\nkill ({catalog_kind}): {len(events)} events, {files} files, {batches} micro-batches, {len(times)} read points"
    )


if __name__ == "__main__":
    stream_job(json.loads(sys.argv[1]))
