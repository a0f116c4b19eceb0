"""Sequence ordering against a real change stream: PostgreSQL logical decoding (tests/cdc_source.py) is both
the source and the oracle.

Random transactions run on PostgreSQL (inserts, upserts, updates of values, keys and the partition-like
column, deletes, rolled-back work, interleaved transactions); their decoded events land as Debezium-like
Arrow batches (``op`` 'c'/'u'/'d', ``lsn`` the event's total order) delivered at least once: shuffled
across batches, duplicated, whole batches replayed. Each batch is upserted, in arrival order, into a mere
table per source table (``primary_key`` the source key, ``cdc_column="op"``, ``sequence_by="lsn"``),
with compactions in the middle and the automatic policy on (the mere catalog on SQLite for half the
seeds, on PostgreSQL for the others). The mere table must then equal PostgreSQL's ``SELECT *`` exactly
(types and values; the ``lsn`` column aside).

Key changes land as a delete of the old key and an insert of the new one at the update's ``lsn``
(``to_arrow_events(split_key_changes=True)``). The source tables' partition-like columns (``day``,
``region``) change under updates that keep the key; mere keys are unique per partition, so those columns
are plain columns of the mere tables here (a key moving between mere partitions needs table-wide keys).

The same batches upserted into tables without ``sequence_by`` (the newest commit wins) end up wrong for
some seed: the stream really is scrambled.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mere
from cdc_source import (
    DEFAULT_TABLES,
    LOGICAL_SETTINGS,
    ChangeSource,
    TableSpec,
    arrow_schema,
    deliver,
    diff_models,
    to_arrow_events,
)
from services import PostgresServer

pytestmark = pytest.mark.postgres

SEEDS = (0, 1, 2, 3)


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    with PostgresServer(settings=LOGICAL_SETTINGS) as pg:
        yield pg


def landing_table(cat: mere.Catalog, name: str, spec: TableSpec, sequenced: bool) -> mere.Table:
    return cat.create_table(
        name,
        arrow_schema(spec),
        primary_key=list(spec.key),
        cdc_column="op",
        sequence_by="lsn" if sequenced else None,
        buckets=3,
        properties={"compaction.min-files": "4"},
    )


def contents(t: mere.Table, spec: TableSpec) -> dict[tuple[Any, ...], dict[str, Any]]:
    rows = t.to_arrow().to_pylist()
    model = {spec.key_of(r): {n: r[n] for n in spec.names} for r in rows}
    assert len(model) == len(rows)
    return model


def test_a_scrambled_stream_lands_as_postgresql_holds_it(server: PostgresServer, tmp_path: Path) -> None:
    commit_order_wrong = 0
    for seed in SEEDS:
        with ChangeSource(server=server) as src:
            src.run_workload(random.Random(1000 + seed), transactions=40, toast=0.02)
            events = src.changes()
            oracle = {name: src.expected_model(name) for name in src.tables}
        batches = deliver(events, random.Random(seed), batches=8, duplicates=0.25, replay_batches=2)
        # The mere catalog lives on PostgreSQL too (half the seeds), beside the source database.
        catalog = server.create_database(f"mere_seq_{seed}") if seed % 2 else None
        cat = mere.connect(str(tmp_path / f"w{seed}"), catalog=catalog)
        sequenced = {s.name: landing_table(cat, f"cdc.{s.name}", s, True) for s in DEFAULT_TABLES}
        arrival = {s.name: landing_table(cat, f"plain.{s.name}", s, False) for s in DEFAULT_TABLES}
        stale = 0
        for i, batch in enumerate(batches):
            for spec in DEFAULT_TABLES:
                landed = to_arrow_events(batch, spec, split_key_changes=True)
                if landed.num_rows:
                    stale += sequenced[spec.name].upsert(landed).stale_rows or 0
                    arrival[spec.name].upsert(landed)
            if i == len(batches) // 2:
                for t in sequenced.values():
                    t.compact()
        for spec in DEFAULT_TABLES:
            t = sequenced[spec.name]
            assert diff_models(contents(t, spec), oracle[spec.name]) == [], (seed, spec.name)
            t.compact()
            assert diff_models(contents(t, spec), oracle[spec.name]) == [], (seed, spec.name)
            commit_order_wrong += bool(diff_models(contents(arrival[spec.name], spec), oracle[spec.name]))
        assert stale > 0  # events a later one of the same key overtook inside a batch
    assert commit_order_wrong > 0
