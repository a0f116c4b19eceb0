"""The production pipeline end to end: Spark and Python against a real S3 server and a PostgreSQL catalog.

CDC batches written by Spark while a Python process upserts other keys concurrently, a compaction run by
Spark, then reads by Spark (data source and ``read_table``) and by Python: all equal to a dict model.
The S3 secret and the catalog password are given as options; they must never appear in Spark's plans,
in its logs (at INFO) or in the errors users see.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

import mere
from mere.demo import COLUMNS, SCHEMA, apply_model, cdc_batch_sql
from mere.integrations.spark import compact, read_table
from services import PostgresServer, SeaweedServer

pytestmark = pytest.mark.postgres

PASSWORD = "pw-" + uuid.uuid4().hex  # the catalog role's password: must never show up


@pytest.fixture(scope="module")
def seaweed() -> Iterator[SeaweedServer]:
    with SeaweedServer() as server:
        yield server


@pytest.fixture
def catalog_with_password(pg_server: PostgresServer) -> str:
    import psycopg
    from psycopg import sql

    name = f"pipeline_{uuid.uuid4().hex[:8]}"
    url = pg_server.create_database(name)
    role = f"app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(
        host="127.0.0.1", port=pg_server.port, user="postgres", dbname=name, autocommit=True
    ) as c:
        c.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role), sql.Literal(PASSWORD))
        )
        c.execute(sql.SQL("GRANT ALL ON SCHEMA public TO {}").format(sql.Identifier(role)))
    return url.replace("postgres@", f"{role}:{PASSWORD}@", 1)


class SparkLog:
    """Spark's own log (log4j, every logger at INFO) copied to a file for the duration of a block."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        self.spark, self.path = spark, path

    def __enter__(self) -> SparkLog:
        jvm = self.spark._jvm
        core = jvm.org.apache.logging.log4j.core
        self.context = jvm.org.apache.logging.log4j.LogManager.getContext(False)
        config = self.context.getConfiguration()
        layout = core.layout.PatternLayout.createDefaultLayout()
        self.appender = (
            core.appender.FileAppender.newBuilder()
            .withFileName(self.path)
            .setName("mere-secrets-test")
            .setLayout(layout)
            .build()
        )
        self.appender.start()
        config.addAppender(self.appender)
        config.getRootLogger().addAppender(self.appender, jvm.org.apache.logging.log4j.Level.INFO, None)
        self.spark.sparkContext.setLogLevel("INFO")
        self.context.updateLoggers()
        return self

    def __exit__(self, *exc: object) -> None:
        self.spark.sparkContext.setLogLevel("ERROR")
        config = self.context.getConfiguration()
        config.getRootLogger().removeAppender("mere-secrets-test")
        self.context.updateLoggers()
        self.appender.stop()

    def text(self) -> str:
        with open(self.path, encoding="utf-8", errors="replace") as f:
            return f.read()


def _plans(df: Any) -> str:
    qe = df._jdf.queryExecution()
    return str(qe.toString()) + str(qe.executedPlan().toString())


def test_s3_postgres_pipeline(
    spark: SparkSession,
    seaweed: SeaweedServer,
    catalog_with_password: str,
    tmp_path: Path,
) -> None:
    assert PASSWORD in catalog_with_password
    storage = seaweed.storage_options()
    secret = storage["secret_access_key"]
    bucket = seaweed.create_bucket(f"pipeline-{uuid.uuid4().hex[:8]}")
    wh = f"s3://{bucket}/wh"
    options = {
        "warehouse": wh,
        "catalog": catalog_with_password,
        **{f"storage.{k}": v for k, v in storage.items()},
    }
    cat = mere.connect(wh, catalog=catalog_with_password, storage_options=storage)
    cat.create_table(
        "shop.orders", SCHEMA, primary_key=["order_id"], partition_by=["day"], buckets=4, cdc_column="op"
    )
    plans = []
    with SparkLog(spark, str(tmp_path / "spark.log")) as log:
        model: dict[int, tuple[Any, ...]] = {}
        lock = threading.Lock()

        def python_upserts() -> None:  # another writer on the same table, on keys Spark never writes
            t = cat.table("shop.orders")
            for k in range(5):
                ids = list(range(1_000_000 + k * 50, 1_000_000 + k * 50 + 80))
                rows = pa.table(
                    {
                        "order_id": ids,
                        "day": ["2026-11-30"] * len(ids),
                        "customer": [f"py{k}"] * len(ids),
                        "qty": [k] * len(ids),
                        "amount": [float(k)] * len(ids),
                        "status": ["python"] * len(ids),
                        "op": ["U"] * len(ids),
                    }
                )
                t.upsert(rows)
                with lock:
                    apply_model(model, rows)

        writer = threading.Thread(target=python_upserts)
        writer.start()
        for b in range(3):
            batch = spark.sql(cdc_batch_sql(b, 4000))
            batch.write.format("mere").mode("append").options(**options).save("shop.orders")
            with lock:
                apply_model(model, batch.toArrow())
        writer.join()

        expected = sorted(model.values())
        t = cat.table("shop.orders")
        assert (
            len({c.operation for c in t.history()}) >= 2 and len(t.history()) >= 9
        )  # 3 Spark + 5 Python + create

        def python_rows() -> list[tuple[Any, ...]]:
            table = t.refresh().scan().to_arrow()
            return sorted(zip(*[table.column(c).to_pylist() for c in COLUMNS]))

        def spark_rows(df: Any) -> list[tuple[Any, ...]]:
            plans.append(_plans(df))
            return sorted(tuple(r[c] for c in COLUMNS) for r in df.collect())

        assert python_rows() == expected
        assert spark_rows(spark.read.format("mere").options(**options).load("shop.orders")) == expected

        result = compact(
            spark, "shop.orders", warehouse=wh, catalog=catalog_with_password, storage_options=storage
        )
        assert result is not None and result.files_removed > result.files_added
        assert python_rows() == expected
        df = read_table(
            spark, "shop.orders", warehouse=wh, catalog=catalog_with_password, storage_options=storage
        )
        assert spark_rows(df) == expected
        grouped = df.groupBy("day").count().collect()
        assert sum(r["count"] for r in grouped) == len(expected)

        # Errors users see: a missing table, a typo in an option, a bad filter.
        errors = []
        for attempt in (
            lambda: spark.read.format("mere").options(**options).load("shop.nope").collect(),
            lambda: (
                spark.read.format("mere")
                .options(**options)
                .option("fitler", "x")
                .load("shop.orders")
                .collect()
            ),
            lambda: (
                spark.read.format("mere")
                .options(**options)
                .option("filter", "nope = 1")
                .load("shop.orders")
                .count()
            ),
            lambda: read_table(
                spark, "shop.nope", warehouse=wh, catalog=catalog_with_password, storage_options=storage
            ),
        ):
            with pytest.raises(Exception) as info:
                attempt()
            errors.append(f"{info.value!r} {info.value}")
    logged = log.text()
    assert "query execution" in logged and "stage" in logged.lower()  # INFO lines were really captured
    for text in (*plans, *errors, logged):
        assert secret not in text
        assert PASSWORD not in text
    assert any("shop.nope" in e for e in errors)
