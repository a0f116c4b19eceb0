"""A time travel to a time without a zone, on Spark (issue 30, item 10): it is in the session time zone
(``spark.sql.session.timeZone``), as Spark reads its own timestamps.

Spark's Python planner gets no session conf: it reads the time in its local zone (the JVM's default, the
session's zone unless one is set), and each read task, which sees the zone the session sets, fails the read
when that zone names another version (never a silently different one). ``read_table`` runs on the driver
and reads the time in the session zone directly.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Iterator

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from sparkutil import read

import mere
from mere.integrations.spark import read_table

UTC = dt.UTC
COMMITS = [  # versions 0..3, rewritten to these times: January, Los Angeles is UTC-8
    dt.datetime(2026, 1, 1, 0, 0, tzinfo=UTC),
    dt.datetime(2026, 1, 1, 1, 0, tzinfo=UTC),
    dt.datetime(2026, 1, 1, 10, 0, tzinfo=UTC),
    dt.datetime(2026, 1, 1, 20, 0, tzinfo=UTC),
]


@pytest.fixture
def los_angeles(spark: SparkSession) -> Iterator[SparkSession]:
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        yield spark
    finally:
        spark.conf.set("spark.sql.session.timeZone", before)


@pytest.fixture
def history(wh: str) -> str:
    t = mere.connect(wh).create_table("z.t", pa.schema([("id", pa.int64())]), primary_key="id")
    for v in (1, 2, 3):
        t.upsert(pa.table({"id": [v]}))  # version v holds ids 1..v
    with sqlite3.connect(f"{wh}/catalog.db") as db:
        for v, when in enumerate(COMMITS):
            micros = (when - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1)
            db.execute(
                "UPDATE mere_commits SET committed_at = ? WHERE table_id = ? AND version = ?",
                (micros, t.record.id, v),
            )
    assert mere.connect(wh).table("z.t").resolve_version(as_of="2026-01-01T12:00:00") == 2  # Python: UTC
    return wh


def test_a_naive_time_naming_another_version_in_the_session_zone_fails(
    los_angeles: SparkSession, history: str
) -> None:
    # 12:00 is version 2 in UTC (the planner's zone here) and 20:00 UTC, version 3, in Los Angeles.
    for option in ("as_of", "timestampAsOf"):
        with pytest.raises(Exception) as caught:
            read(los_angeles, history, "z.t", **{option: "2026-01-01T12:00:00"}).collect()
        text = str(caught.value)
        assert "InvalidInput" in text and "America/Los_Angeles" in text and "UTC" in text, text[-3000:]
        assert "explicit offset" in text and "2026-01-01T12:00:00-08:00" in text


def test_a_naive_time_naming_the_same_version_reads_it(los_angeles: SparkSession, history: str) -> None:
    # 01:30 UTC and 09:30 UTC (01:30 in Los Angeles) both read version 1.
    assert read(los_angeles, history, "z.t", as_of="2026-01-01T01:30:00").count() == 1
    assert read(los_angeles, history, "z.t", as_of="2026-01-01T12:00:00-08:00").count() == 3  # an offset
    assert read(los_angeles, history, "z.t", as_of="2026-01-01T12:00:00Z").count() == 2


def test_read_table_reads_a_naive_time_in_the_session_zone(los_angeles: SparkSession, history: str) -> None:
    assert read_table(los_angeles, "z.t", warehouse=history, as_of="2026-01-01T12:00:00").count() == 3
    naive = dt.datetime(2026, 1, 1, 12, 0)
    assert read_table(los_angeles, "z.t", warehouse=history, as_of=naive).count() == 3
    assert (
        read_table(
            los_angeles, "z.t", warehouse=history, options={"timestampAsOf": "2026-01-01T12:00:00"}
        ).count()
        == 3
    )
    los_angeles.conf.set("spark.sql.session.timeZone", "UTC")
    assert read_table(los_angeles, "z.t", warehouse=history, as_of="2026-01-01T12:00:00").count() == 2
    assert read(los_angeles, history, "z.t", as_of="2026-01-01T12:00:00").count() == 2  # UTC set explicitly


def test_session_zone_names() -> None:
    """The zones spark.sql.session.timeZone takes: regions and offsets (Python refuses what it does not know,
    and a task then fails the read rather than guess)."""
    from mere.integrations.spark.options import session_zone

    assert session_zone("+05:30") == dt.timezone(dt.timedelta(hours=5, minutes=30))
    assert session_zone("GMT-8") == dt.timezone(-dt.timedelta(hours=8)) and session_zone("Z") is UTC
    assert str(session_zone("America/Los_Angeles")) == "America/Los_Angeles"
    assert session_zone("Mars/Olympus") is None
