"""Review 47: adversarial checks of names read without case in SQL statements (DuckDB as the oracle) and
of catalog transaction keys that record the tables a transaction left unchanged."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pytest

import mere
from mere import errors

sys.path.insert(0, str(Path(__file__).resolve().parent / "lang"))
from test_sql_forms import Target, check, source_table

TARGET = Target(("k", "a", "v"), ("k",), ((1, 10, 1), (2, 20, 2)))


def test_a_source_aliased_with_the_tables_name_reads_its_names_without_case() -> None:
    # DuckDB: stock is the source here (the target is t), and stock.W is the source's w.
    source = source_table(["k", "a", "w"], [(1, 5, 9), (3, 7, 9)])
    check(
        TARGET,
        "MERGE INTO {t} AS t USING s AS stock ON t.k = stock.K WHEN MATCHED THEN UPDATE SET v = stock.W",
        source,
    )


@pytest.mark.parametrize(
    "statement",
    [
        # USING (cols) in odd case; a bare pair name in each kind of clause; BY SOURCE sees the target only.
        "MERGE INTO {t} USING s USING (K) WHEN MATCHED THEN UPDATE SET v = k + s.W",
        "MERGE INTO {t} USING s USING (k) WHEN NOT MATCHED THEN INSERT (K, V) VALUES (K, W)",
        "MERGE INTO {t} USING s USING (k) WHEN NOT MATCHED BY SOURCE AND A = 20 THEN UPDATE SET v = K * 100",
        "MERGE INTO {t} USING s USING (k) WHEN NOT MATCHED BY SOURCE AND s.w = 2 THEN DELETE",
        # Aliases equal to column names; CASE and IN lists; ambiguity of a bare name both sides have.
        "MERGE INTO {t} AS t USING s AS k ON t.k = K.K WHEN MATCHED THEN UPDATE SET v = k.W",
        "MERGE INTO {t} USING s AS w ON stock.k = w.k WHEN MATCHED THEN UPDATE SET v = w",
        "MERGE INTO {t} USING s ON stock.k = s.k WHEN MATCHED AND s.W IN (9, STOCK.V) "
        "THEN UPDATE SET V = CASE s.A WHEN 5 THEN -1 ELSE 0 END",
        "MERGE INTO {t} USING s ON stock.k = s.k WHEN MATCHED AND A > 0 THEN DELETE",
        "MERGE INTO {t} USING s ON K = s.k WHEN MATCHED THEN DELETE",
        "MERGE INTO {t} AS x USING s AS X ON x.k = x.k WHEN MATCHED THEN DELETE",
        "MERGE INTO {t} USING s ON stock.k = s.k WHEN MATCHED THEN UPDATE SET STOCK.v = s.w",
        "MERGE INTO {t} USING s ON stock.k = s.k WHEN NOT MATCHED THEN INSERT (k, v) VALUES (STOCK.K, 1)",
        "MERGE INTO {t} USING s ON stock.k = s.k WHEN MATCHED THEN UPDATE BY NAME",
        "UPDATE {t} AS k SET v = k + K.A WHERE K.k IN (1, 3)",
        "UPDATE {t} SET (V, A) = (K, v)",
        "DELETE FROM {t} AS v WHERE V = 1 OR v.A = 20",
        "UPDATE {t} SET v = (SELECT max(k) FROM stock)",  # mere refuses subqueries (documented)
    ],
)
def test_names_without_case_match_duckdb(statement: str) -> None:
    source = source_table(["K", "A", "w"], [(1, 5, 9), (3, 7, 2)])
    refused = "SUBQUERY" if "SELECT" in statement else None
    check(TARGET, statement, source if statement.startswith("MERGE") else None, refused=refused)


# -- catalog transaction keys and the tables they left unchanged ------------------------------------------

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64())])


def rows(ids: list[int]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(ids, pa.int64())})


def _first_run(cat: mere.Catalog) -> None:
    cat.create_table("s.a", SCHEMA, primary_key="id")
    cat.create_table("s.b", SCHEMA, primary_key="id").upsert(rows([7]))
    with cat.transaction(idempotency_key="k1") as tx:
        tx.table("s.a").upsert(rows([1]))
        tx.table("s.b").delete("id = 99")  # finds nothing: b is left unchanged
    assert tx.results["s.b"].no_change and not tx.results["s.a"].no_change


def test_a_rerun_after_the_unchanged_table_changed_replays_it_at_its_current_version(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path))
    _first_run(cat)
    cat.table("s.b").upsert(rows([8]))
    with cat.transaction(idempotency_key="k1") as again:
        again.table("s.a").upsert(rows([100]))
        again.table("s.b").delete("id = 7")  # not run: the key's work landed
    assert all(r.already_committed for r in again.results.values())
    assert again.results["s.b"].version == cat.table("s.b").version == 2
    assert sorted(r["id"] for r in cat.table("s.b").to_arrow().to_pylist()) == [7, 8]
    assert [r["id"] for r in cat.table("s.a").to_arrow().to_pylist()] == [1]
    with (
        pytest.raises(errors.InvalidInput, match="committed tables"),
        cat.transaction(idempotency_key="k1") as sub,
    ):
        sub.table("s.a").upsert(rows([5]))  # the key names both tables (docs/concepts.md)


def test_a_rerun_replays_after_the_unchanged_table_was_created_again(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path))
    _first_run(cat)
    cat.drop_table("s.b")
    cat.create_table("s.b", SCHEMA, primary_key="id").upsert(rows([5]))
    with cat.transaction(idempotency_key="k1") as again:
        again.table("s.a").upsert(rows([100]))
        again.table("s.b").upsert(rows([100]))
    assert all(r.already_committed for r in again.results.values())
    b = again.results["s.b"]
    assert b.no_change and b.snapshot is None and b.committed_at == again.results["s.a"].committed_at
    assert [r["id"] for r in cat.table("s.a").to_arrow().to_pylist()] == [1]
    assert [r["id"] for r in cat.table("s.b").to_arrow().to_pylist()] == [5]  # the new table, untouched


@pytest.mark.parametrize("recreate", [True, False])
def test_a_rerun_replays_after_a_changed_table_was_dropped(tmp_path: Path, recreate: bool) -> None:
    """The key's work landed: a rerun writes nothing, whatever became of the tables it wrote."""
    cat = mere.connect(str(tmp_path))
    _first_run(cat)
    first_a = cat.table("s.a").version
    cat.drop_table("s.a", purge=True)
    if recreate:
        cat.create_table("s.a", SCHEMA, primary_key="id").upsert(rows([5, 6]))
        with cat.transaction(idempotency_key="k1") as again:
            again.table("s.a").upsert(rows([100]))
            again.table("s.b").delete("id = 7")
        a = again.results["s.a"]
        assert a.already_committed and a.version == first_a and not a.no_change and a.snapshot is None
        assert again.results["s.b"].already_committed
        assert sorted(r["id"] for r in cat.table("s.a").to_arrow().to_pylist()) == [5, 6]
    else:
        with pytest.raises(errors.NoSuchTable), cat.transaction(idempotency_key="k1") as again:
            again.table("s.a").upsert(rows([100]))  # the name names no table: nothing to replay into
    assert [r["id"] for r in cat.table("s.b").to_arrow().to_pylist()] == [7]
