"""The same SQL text on DuckDB and on mere gives the same rows and counts, or mere refuses it with a reason.

Each test runs one statement on a DuckDB table and on a mere table holding the same rows (the source, for
MERGE, registered in DuckDB and given to ``mere.sql``), then compares the final rows, the statement's
count (DuckDB's count of changed rows; mere's ``MergeMetrics`` or ``CommitResult``) and whether it
failed. A failed mere statement must leave the table as it was. Where mere refuses on purpose what DuckDB
runs (docs/sql.md lists each refused form), the case names the refusal it expects.

Classes covered (issue 37):

* ``*`` actions: ``UPDATE SET *`` / ``INSERT *`` (and the bare ``UPDATE`` / ``INSERT`` and ``BY POSITION``)
  pair columns by position with the counts checked; ``BY NAME`` pairs them by name and refuses a column
  the table lacks. The Python builder's ``*_all()`` refuse such a column too.
* ``MERGE ... USING (columns)`` as key equality, bare USING columns naming the pair.
* ``UPDATE SET (a, b) = (x, y)`` multiple assignment, in UPDATE and in MERGE.
* Qualified SET columns refused as DuckDB refuses them.
* A key column set to the value the ON condition equates it with (dbt's MERGE text) is a no-op.
* ``rows_deleted`` counts the rows that existed and were deleted, as DuckDB's DELETE count.
* Extension-typed fields (DuckDB's GEOMETRY) are refused by ``create_table``.
"""

from __future__ import annotations

import atexit
import itertools
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

import mere
from mere import errors

pytestmark = pytest.mark.timeout(600)

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)

KEY_REFUSED = r"cannot set key or partition column"

# -- running one statement on both ----------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A table: its columns (all BIGINT), key, partition columns and rows."""

    columns: tuple[str, ...]
    key: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    partition_by: tuple[str, ...] = ()

    def arrow(self) -> pa.Table:
        return pa.table(
            {c: pa.array([r[i] for r in self.rows], pa.int64()) for i, c in enumerate(self.columns)}
        )


@dataclass
class Outcome:
    error: BaseException | None
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    count: int | None = None


_SHARED: dict[str, Any] = {}
_NAMES = itertools.count()


def shared_catalog() -> mere.Catalog:
    """One catalog per test process (connecting costs more than a table); every run gets its own table."""
    if "catalog" not in _SHARED:
        path = tempfile.mkdtemp(prefix="mere-sql-forms-")
        atexit.register(shutil.rmtree, path, ignore_errors=True)
        _SHARED["catalog"] = mere.connect(path)
    catalog: mere.Catalog = _SHARED["catalog"]
    return catalog


def sorted_rows(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(rows, key=lambda r: tuple((v is None, v) for v in r))


def run_duck(target: Target, statement: str, source: pa.Table | None) -> Outcome:
    con = duckdb.connect(":memory:", config={"threads": "1"})
    columns = ", ".join(f"{c} BIGINT" for c in target.columns)
    key = f", PRIMARY KEY ({', '.join(target.key)})" if target.key else ""
    con.execute(f"CREATE TABLE stock ({columns}{key})")
    con.register("initial", target.arrow())
    con.execute("INSERT INTO stock SELECT * FROM initial")
    if source is not None:
        con.register("s", source)
    try:
        count = con.execute(statement.format(t="stock")).fetchall()[0][0]
    except duckdb.Error as exc:
        return Outcome(exc)
    return Outcome(None, sorted_rows(con.execute("SELECT * FROM stock").fetchall()), count)


def run_mere(target: Target, statement: str, source: pa.Table | None) -> Outcome:
    cat = shared_catalog()
    name = f"n{next(_NAMES)}.stock"
    schema = pa.schema([pa.field(c, pa.int64()) for c in target.columns])
    t = cat.create_table(
        name, schema, primary_key=list(target.key) or None, partition_by=list(target.partition_by) or None
    )
    if target.rows:
        (t.upsert if target.key else t.append)(target.arrow())
    before = (t.version, sorted_rows([tuple(r.values()) for r in t.to_arrow().to_pylist()]))
    try:
        result = mere.sql(
            statement.format(t=name), catalog=cat, **({"s": source} if source is not None else {})
        )
    except errors.MereError as exc:
        t = cat.table(name)
        after = (t.version, sorted_rows([tuple(r.values()) for r in t.to_arrow().to_pylist()]))
        assert after == before, f"failed statement ({exc!r}) changed the table"
        return Outcome(exc)
    if isinstance(result, mere.MergeMetrics):
        count: int | None = result.inserted + result.updated + result.deleted
    elif result.operation == "delete":
        count = result.rows_deleted
    else:
        count = result.rows_written
    rows = sorted_rows([tuple(r[c] for c in target.columns) for r in cat.table(name).to_arrow().to_pylist()])
    return Outcome(None, rows, count)


def check(target: Target, statement: str, source: pa.Table | None = None, refused: str | None = None) -> None:
    """Same rows and count as DuckDB, or both fail; ``refused``: mere refuses (a documented difference)."""
    want = run_duck(target, statement, source)
    got = run_mere(target, statement, source)
    if currently_in_test_context():
        note(f"{statement}\ntarget {target}\nsource {source.to_pylist() if source is not None else None}")
        note(f"duckdb: {want.error!r}; mere: {got.error!r}")
    if refused is not None and want.error is None:
        assert got.error is not None and re.search(refused, str(got.error)), (
            f"expected mere to refuse ({refused}), got {got.error!r}"
        )
        return
    assert (want.error is None) == (got.error is None), f"duckdb {want.error!r}, mere {got.error!r}"
    if want.error is None:  # (where DuckDB fails, so must mere, whatever it refused for)
        assert got.rows == want.rows, f"rows: mere {got.rows}, duckdb {want.rows}"
        assert got.count == want.count, f"count: mere {got.count}, duckdb {want.count}"


def source_table(columns: list[str], rows: list[tuple[Any, ...]]) -> pa.Table:
    return pa.table({c: pa.array([r[i] for r in rows], pa.int64()) for i, c in enumerate(columns)})


VALUE = st.one_of(st.none(), st.integers(-3, 30))


@st.composite
def targets(draw: st.DrawFn, values: tuple[str, ...] | None = None, composite: bool = False) -> Target:
    if values is None:
        values = tuple(draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True)))
    key = ("r", "k") if composite else ("k",)
    keys = draw(
        st.lists(st.tuples(*(st.integers(0, 2 if c == "r" else 8) for c in key)), max_size=6, unique=True)
    )
    rows = tuple((*kk, *(draw(VALUE) for _ in values)) for kk in keys)
    return Target((*key, *values), key, rows, ("r",) if composite and draw(st.booleans()) else ())


# -- 1. * actions ------------------------------------------------------------------------------------------

MATCHED_STAR = ["UPDATE SET *", "UPDATE", "UPDATE BY POSITION", "UPDATE BY NAME"]
NOT_MATCHED_STAR = ["INSERT *", "INSERT", "INSERT BY POSITION", "INSERT BY NAME"]


@st.composite
def star_cases(draw: st.DrawFn) -> tuple[Target, str, pa.Table, str | None]:
    target = draw(targets())
    names = ["k", *draw(st.lists(st.sampled_from(["a", "b", "c", "x", "B"]), max_size=4, unique=True))]
    if "b" in names and "B" in names:
        names.remove("B")  # DuckDB would rename one of two names that differ in case only
    names = draw(st.permutations(names))
    keys = draw(st.lists(st.integers(0, 10), min_size=1, max_size=5, unique=True))
    source = source_table(names, [tuple(k if c == "k" else draw(VALUE) for c in names) for k in keys])
    matched = draw(st.sampled_from([None, *MATCHED_STAR]))
    not_matched = draw(
        st.sampled_from([None, *NOT_MATCHED_STAR]) if matched else st.sampled_from(NOT_MATCHED_STAR)
    )
    clauses = []
    if matched:
        clauses.append(f"WHEN MATCHED THEN {matched}")
    if not_matched:
        clauses.append(f"WHEN NOT MATCHED THEN {not_matched}")
    statement = "MERGE INTO {t} USING s ON stock.k = s.k " + " ".join(clauses)
    # A positional UPDATE that sets the key from another source column than k would change the key.
    positional = matched is not None and "NAME" not in matched
    moves_key = positional and len(names) == len(target.columns) and names[0] != "k"
    return target, statement, source, KEY_REFUSED if moves_key else None


@SETTINGS
@given(star_cases())
def test_star_actions_match_duckdb(case: tuple[Target, str, pa.Table, str | None]) -> None:
    """``*`` is positional with the count checked; BY NAME refuses a column the table lacks."""
    check(*case[:3], refused=case[3])


@pytest.mark.parametrize(
    ("source", "action", "want"),
    [
        # The issue's cases: stock(item_id, balance) holding (5, 10), (10, 20).
        ({"item_id": [10]}, "WHEN MATCHED THEN UPDATE SET *", None),  # column count differs: both refuse
        ({"item_id": [10], "balanc": [99]}, "WHEN MATCHED THEN UPDATE BY NAME", None),  # unknown: refused
        ({"item_id": [10], "balanc": [99]}, "WHEN MATCHED THEN UPDATE SET *", [(5, 10), (10, 99)]),
        ({"balanc": [3], "item_id": [8]}, "WHEN NOT MATCHED THEN INSERT *", [(3, 8), (5, 10), (10, 20)]),
        (
            {"balance": [3], "item_id": [8]},
            "WHEN NOT MATCHED THEN INSERT BY NAME",
            [(5, 10), (8, 3), (10, 20)],
        ),
    ],
)
def test_star_actions_of_the_issue(source: dict[str, list[int]], action: str, want: Any) -> None:
    target = Target(("item_id", "balance"), ("item_id",), ((5, 10), (10, 20)))
    statement = "MERGE INTO {t} USING s ON stock.item_id = s.item_id " + action
    check(target, statement, source_table(list(source), list(zip(*source.values()))))
    got = run_mere(target, statement, source_table(list(source), list(zip(*source.values()))))
    assert (got.rows if got.error is None else None) == want


@pytest.mark.parametrize("action", ["UPDATE SET * EXCEPT (op)", "UPDATE SET * REPLACE (1 AS v)"])
def test_star_with_modifiers_is_refused(action: str) -> None:
    target = Target(("k", "v"), ("k",), ((1, 1),))
    source = source_table(["k", "v", "op"], [(1, 2, 3)])
    check(target, "MERGE INTO {t} USING s ON stock.k = s.k WHEN MATCHED THEN " + action, source)


@pytest.mark.parametrize("method", ["when_matched_update_all", "when_not_matched_insert_all"])
def test_builder_all_clauses_refuse_a_column_the_table_lacks(local_cat: mere.Catalog, method: str) -> None:
    t = local_cat.create_table("a.t", pa.schema([("k", pa.int64()), ("v", pa.int64())]), primary_key="k")
    t.upsert(pa.table({"k": [1], "v": [1]}))
    before = (t.version, t.to_arrow())
    for extra in ({"op": ["U", "I"]}, {"V": [5, 6]}):  # names match exactly: V is not v
        source = pa.table({"k": [1, 2], "v": [5, 6], **extra})
        merge = getattr(t.merge(source), method)()  # refused by execute(): a replay of a key would pass
        with pytest.raises(errors.InvalidInput, match=rf"by name.*{list(extra)}"):
            merge.execute()
        with pytest.raises(errors.InvalidInput, match=rf"by name.*{list(extra)}"), t.transaction() as tx:
            getattr(tx.merge(source), method)().execute()
    assert (t.version, t.to_arrow()) == before


def test_builder_all_clauses_take_the_tables_change_column(local_cat: mere.Catalog) -> None:
    """The table's cdc_column is known to its writes (not stored): *_all() let it pass."""
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    t = local_cat.create_table("a.t", schema, primary_key="k", cdc_column="op")
    t.upsert(pa.table({"k": [1], "v": [1]}))
    source = pa.table({"k": [1, 2], "v": [5, None], "op": ["U", "I"]})
    metrics = t.merge(source).when_matched_update_all().when_not_matched_insert_all().execute()
    assert (metrics.inserted, metrics.updated) == (1, 1)
    assert t.to_arrow().sort_by("k").to_pylist() == [{"k": 1, "v": 5}, {"k": 2, "v": None}]


# -- 4. MERGE ... USING (columns) --------------------------------------------------------------------------


@st.composite
def using_cases(draw: st.DrawFn) -> tuple[Target, str, pa.Table, str | None]:
    composite = draw(st.booleans())
    target = draw(targets(("a", "b"), composite=composite))
    key = list(target.key)
    joined = draw(st.permutations(key))
    if draw(st.integers(0, 4)) == 0:
        joined = [*joined, "a"]  # an equality beyond the key
    refused = None
    if composite and draw(st.integers(0, 4)) == 0:
        joined = ["k"]  # DuckDB pairs on k alone; mere pairs rows by the whole key
        refused = "must equate every key column"
    names = [*key, *draw(st.lists(st.sampled_from(["a", "b"]), max_size=2, unique=True))]
    keys = draw(
        st.lists(
            st.tuples(*(st.integers(0, 2 if c == "r" else 10) for c in key)),
            min_size=1,
            max_size=5,
            unique=True,
        )
    )
    source = source_table(names, [(*kk, *(draw(VALUE) for _ in names[len(key) :])) for kk in keys])
    s_values = [c for c in names if c not in key] or ["k"]
    value = st.sampled_from(["k", "stock.a", f"s.{s_values[0]}", "k + stock.b", "a", "COALESCE(stock.a, k)"])
    clauses = []
    if draw(st.booleans()):
        cond = draw(st.sampled_from(["", " AND k > 3", " AND stock.a IS NULL"]))
        clauses.append(f"WHEN MATCHED{cond} THEN UPDATE SET a = {draw(value)}")
    if draw(st.booleans()):
        clauses.append("WHEN MATCHED THEN DELETE")
    if draw(st.booleans()):
        inserted = ", ".join(
            ["k" if c == "k" else f"s.{c}" if c in names else "NULL" for c in target.columns]
        )
        clauses.append(f"WHEN NOT MATCHED THEN INSERT VALUES ({inserted})")
    if draw(st.booleans()):
        clauses.append(
            f"WHEN NOT MATCHED BY SOURCE AND k % 2 = 0 THEN UPDATE SET b = {draw(st.sampled_from(['k', 'a', 'b + k']))}"
        )
    if not clauses:
        clauses.append("WHEN MATCHED THEN DELETE")
    statement = f"MERGE INTO {{t}} USING s USING ({', '.join(joined)}) " + " ".join(clauses)
    return target, statement, source, refused


@SETTINGS
@given(using_cases())
def test_merge_using_columns_matches_duckdb(case: tuple[Target, str, pa.Table, str | None]) -> None:
    """USING (cols) equates those columns; a bare USING column names the pair (a bare ``a`` that both
    sides have and USING does not name stays ambiguous, in both)."""
    check(*case[:3], refused=case[3])


@pytest.mark.parametrize(
    "statement",
    [
        "MERGE INTO {t} USING s USING (K) WHEN MATCHED THEN UPDATE SET a = s.a + k",  # names without case
        "MERGE INTO {t} AS x USING s AS y USING (k) WHEN MATCHED AND y.a > x.a THEN DELETE",
        "MERGE INTO {t} USING s ON stock.k = s.k USING (k) WHEN MATCHED THEN DELETE",  # both: refused
        "MERGE INTO {t} USING s USING (nope) WHEN MATCHED THEN DELETE",
        "MERGE INTO {t} USING s USING (k) WHEN MATCHED THEN UPDATE SET a = a",  # a is not a USING column
    ],
)
def test_merge_using_columns_edges(statement: str) -> None:
    target = Target(("k", "a"), ("k",), ((1, 1), (2, 2)))
    check(target, statement, source_table(["k", "a"], [(1, 5), (3, 7)]))


# -- 5. multiple assignment --------------------------------------------------------------------------------


@st.composite
def assignment_lists(draw: st.DrawFn, values: list[str]) -> str:
    columns = draw(st.permutations(draw(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, unique=True))))
    parts = []
    rest = list(columns)
    while rest:
        size = draw(st.integers(1, len(rest)))
        group, rest = rest[:size], rest[size:]
        exprs = [draw(st.sampled_from(values)) for _ in group]
        form = draw(st.sampled_from(["plain", "tuple", "row", "paren"]))
        if form == "plain" or (form == "paren" and len(group) > 1):
            parts += [f"{c} = {e}" for c, e in zip(group, exprs)]
        elif form == "paren":
            parts.append(f"({group[0]}) = {exprs[0]}")
        elif form == "tuple":
            parts.append(f"({', '.join(group)}) = ({', '.join(exprs)})")
        else:
            parts.append(f"({', '.join(group)}) = ROW({', '.join(exprs)})")
    return ", ".join(parts)


@st.composite
def multiple_assignment_cases(draw: st.DrawFn) -> tuple[Target, str, pa.Table | None]:
    target = draw(targets(("a", "b", "c")))
    if draw(st.booleans()):
        where = draw(st.sampled_from(["", " WHERE k > 3", " WHERE a IS NOT NULL", " WHERE k IN (1, 2, 40)"]))
        sets = draw(assignment_lists(["1", "NULL", "a + 1", "b", "c * 2", "k"]))
        return target, f"UPDATE {{t}} SET {sets}{where}", None
    keys = draw(st.lists(st.integers(0, 10), min_size=1, max_size=5, unique=True))
    source = source_table(["k", "a"], [(k, draw(VALUE)) for k in keys])
    sets = draw(assignment_lists(["s.a", "stock.b", "s.a + stock.c", "NULL", "7"]))
    return target, f"MERGE INTO {{t}} USING s ON stock.k = s.k WHEN MATCHED THEN UPDATE SET {sets}", source


@SETTINGS
@given(multiple_assignment_cases())
def test_multiple_assignment_matches_duckdb(case: tuple[Target, str, pa.Table | None]) -> None:
    check(*case)


@pytest.mark.parametrize(
    "sets",
    [
        "(a, b) = (1, 2, 3)",  # more values than columns
        "(a, b, c) = (1, 2)",
        "(a, b) = (1)",  # one value: every column's (DuckDB's reading)
        "(a, b) = a + 1",
        "(a) = (1, 2)",
        "(a, a) = (1, 2)",  # a column twice
        "(a, b) = (1, 2), b = 3",
        "(a, b) = (SELECT 1, 2)",
        "(a, b) = [1, 2]",
    ],
)
def test_edge_multiple_assignments_run_or_fail_as_in_duckdb(sets: str) -> None:
    target = Target(("k", "a", "b", "c"), ("k",), ((1, 1, 1, 1), (2, 2, 2, 2)))
    check(target, f"UPDATE {{t}} SET {sets}")


def test_a_subquery_assigned_is_refused() -> None:
    """DuckDB runs a one-column subquery; mere runs no query (docs/sql.md)."""
    target = Target(("k", "a"), ("k",), ((1, 1),))
    check(target, "UPDATE {t} SET (a) = (SELECT 2)", refused=r"subquery.*not supported")


# -- 6. qualified SET columns ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE {t} SET stock.a = 1",
        "UPDATE {t} AS x SET x.a = 1",
        "UPDATE {t} SET stock.a = 1, b = 2 WHERE k = 1",
        "UPDATE {t} SET (stock.a) = 1",
        "MERGE INTO {t} USING s ON stock.k = s.k WHEN MATCHED THEN UPDATE SET stock.a = s.a",
        "MERGE INTO {t} AS x USING s ON x.k = s.k WHEN MATCHED THEN UPDATE SET x.a = s.a, b = 1",
    ],
)
def test_qualified_set_columns_are_refused_as_duckdb_refuses_them(statement: str) -> None:
    target = Target(("k", "a", "b"), ("k",), ((1, 1, 1), (2, 2, 2)))
    source = source_table(["k", "a"], [(1, 9)]) if statement.startswith("MERGE") else None
    check(target, statement, source)
    got = run_mere(target, statement, source)
    assert got.error is not None and (
        "Qualified column names in UPDATE .. SET not supported" in str(got.error) or "(stock.a)" in statement
    )


# -- 7. a key set to itself: dbt's MERGE -------------------------------------------------------------------

DBT_TARGET = Target(("id", "name", "amount"), ("id",), ((1, 10, 100), (2, 20, 200), (3, 30, 300)))
DBT_SOURCE = source_table(["id", "name", "amount"], [(2, 21, 201), (3, 30, None), (4, 40, 400)])

# dbt-core's default__get_merge_sql for an incremental model with unique_key='id' (every column set).
DBT_CORE = """
    merge into {t} as DBT_INTERNAL_DEST
        using s as DBT_INTERNAL_SOURCE
        on ((DBT_INTERNAL_SOURCE.id = DBT_INTERNAL_DEST.id))

    when matched then update set
        "id" = DBT_INTERNAL_SOURCE."id","name" = DBT_INTERNAL_SOURCE."name","amount" = DBT_INTERNAL_SOURCE."amount"

    when not matched then insert
        ("id", "name", "amount")
    values
        ("id", "name", "amount")
"""
# dbt-duckdb's duckdb__get_merge_sql defaults: UPDATE BY NAME / INSERT BY NAME, ON or USING.
DBT_DUCKDB = """
    MERGE INTO {t} AS DBT_INTERNAL_DEST
        USING s AS DBT_INTERNAL_SOURCE
        ON (DBT_INTERNAL_SOURCE.id = DBT_INTERNAL_DEST.id)
    WHEN MATCHED
    THEN
        UPDATE BY NAME
    WHEN NOT MATCHED
    THEN
        INSERT BY NAME
"""
DBT_DUCKDB_USING = """
    MERGE INTO {t} AS DBT_INTERNAL_DEST
        USING s AS DBT_INTERNAL_SOURCE
        USING (id)
    WHEN MATCHED THEN UPDATE BY NAME
    WHEN NOT MATCHED THEN INSERT BY NAME
"""
# dbt-spark's spark__get_merge_sql (backtick-quoted; UPDATE SET * / INSERT * without merge_update_columns).
DBT_SPARK = """
    merge into {t} as DBT_INTERNAL_DEST
      using s as DBT_INTERNAL_SOURCE
      on DBT_INTERNAL_SOURCE.`id` = DBT_INTERNAL_DEST.`id`
      when matched then update set *
      when not matched then insert *
"""
DBT_SPARK_COLUMNS = """
    merge into {t} as DBT_INTERNAL_DEST
      using s as DBT_INTERNAL_SOURCE
      on DBT_INTERNAL_SOURCE.`id` = DBT_INTERNAL_DEST.`id`
      when matched then update set
         `id` = DBT_INTERNAL_SOURCE.`id`, `name` = DBT_INTERNAL_SOURCE.`name`, `amount` = DBT_INTERNAL_SOURCE.`amount`
      when not matched then insert *
"""


@pytest.mark.parametrize(
    "statement",
    [DBT_CORE, DBT_DUCKDB, DBT_DUCKDB_USING, DBT_SPARK, DBT_SPARK_COLUMNS],
    ids=["dbt-core", "dbt-duckdb", "dbt-duckdb-using", "dbt-spark", "dbt-spark-columns"],
)
def test_dbt_incremental_merge_runs_as_in_duckdb(statement: str) -> None:
    duck_text = statement.replace("`", '"')  # DuckDB reads no backticks; mere reads both
    want = run_duck(DBT_TARGET, duck_text, DBT_SOURCE)
    got = run_mere(DBT_TARGET, statement, DBT_SOURCE)
    assert want.error is None and got.error is None, (want.error, got.error)
    assert got.rows == want.rows == [(1, 10, 100), (2, 21, 201), (3, 30, None), (4, 40, 400)]
    assert got.count == want.count == 3


def test_dbt_merge_with_a_composite_unique_key() -> None:
    target = Target(("r", "k", "v"), ("r", "k"), ((0, 1, 1), (1, 1, 2)), partition_by=("r",))
    source = source_table(["r", "k", "v"], [(1, 1, 5), (2, 1, 6)])
    statement = """
        merge into {t} as DBT_INTERNAL_DEST using s as DBT_INTERNAL_SOURCE
        on (DBT_INTERNAL_SOURCE.r = DBT_INTERNAL_DEST.r) and (DBT_INTERNAL_SOURCE.k = DBT_INTERNAL_DEST.k)
        when matched then update set "r" = DBT_INTERNAL_SOURCE."r", "k" = DBT_INTERNAL_SOURCE."k",
            "v" = DBT_INTERNAL_SOURCE."v"
        when not matched then insert ("r", "k", "v") values ("r", "k", "v")
    """
    check(target, statement, source)


@st.composite
def key_assignment_cases(draw: st.DrawFn) -> tuple[Target, str, pa.Table, str | None]:
    """SET of a key column: accepted exactly where it keeps the row's value; SET of a partition column
    (outside the key, table-wide keys): accepted, the row moves."""
    partitioned = draw(st.booleans())
    columns = ("k", "p", "v") if partitioned else ("k", "v")
    keys = draw(st.lists(st.integers(0, 6), max_size=5, unique=True))
    rows = tuple((k, *((draw(st.integers(0, 2)),) if partitioned else ()), draw(VALUE)) for k in keys)
    target = Target(columns, ("k",), rows, ("p",) if partitioned else ())
    on_column = draw(st.sampled_from(["k", "id"]))
    names = [on_column, "v", *(["k"] if on_column != "k" else []), *(["p"] if partitioned else [])]
    s_keys = draw(st.lists(st.integers(0, 8), min_size=1, max_size=4, unique=True))
    source = source_table(names, [(k, *(draw(st.integers(0, 8)) for _ in names[1:])) for k in s_keys])
    keeps = [f"s.{on_column}", "stock.k", f"(s.{on_column})"]
    changes = ["s.v", "stock.k + 1", f"s.{on_column} + 0"] + (["s.k"] if on_column != "k" else [])
    value = draw(st.sampled_from(keeps + changes))
    sets = [f"k = {value}", "v = s.v"]
    refused = None if value in keeps else KEY_REFUSED
    if partitioned:
        # Table-wide keys (the default where the partition column is outside the key): setting the
        # partition column moves the row, as DuckDB's UPDATE does.
        p_value = draw(st.sampled_from(["stock.p", "s.p", "stock.p + 0"]))
        sets.append(f"p = {p_value}")
    statement = (
        f"MERGE INTO {{t}} USING s ON stock.k = s.{on_column} WHEN MATCHED THEN UPDATE SET "
        + ", ".join(draw(st.permutations(sets)))
    )
    return target, statement, source, refused


@SETTINGS
@given(key_assignment_cases())
def test_key_assignments_that_keep_the_key_match_duckdb(
    case: tuple[Target, str, pa.Table, str | None],
) -> None:
    check(*case[:3], refused=case[3])


@pytest.mark.parametrize(
    ("sets", "refused"),
    [("k = k", None), ("k = k, a = a + 1", None), ("k = k + 0", KEY_REFUSED), ("k = a", KEY_REFUSED)],
)
def test_update_of_a_key_to_itself(sets: str, refused: str | None) -> None:
    target = Target(("k", "a"), ("k",), ((1, 1), (2, 2)))
    check(target, f"UPDATE {{t}} SET {sets} WHERE k > 1", refused=refused)


# -- 3. rows_deleted counts rows that existed ----------------------------------------------------------------


@st.composite
def count_cases(draw: st.DrawFn) -> tuple[Target, str]:
    keyed = draw(st.integers(0, 3)) > 0
    target = draw(targets(("a",), composite=keyed and draw(st.booleans())))
    if not keyed:
        target = Target(target.columns, (), target.rows)
    present = [r[target.columns.index("k")] for r in target.rows]
    listed = draw(
        st.lists(st.one_of(st.sampled_from(present or [0]), st.integers(-2, 12)), min_size=1, max_size=6)
    )
    where = draw(
        st.sampled_from(
            [
                f"k IN ({', '.join(map(str, listed))})",
                f"k = {listed[0]}",
                f"k IN ({', '.join(map(str, listed))}) AND a IS NULL",
                f"k BETWEEN {min(listed)} AND {max(listed)}",
                "a > 5",
                "TRUE",
                "k = 99",
            ]
        )
    )
    statement = draw(
        st.sampled_from([f"DELETE FROM {{t}} WHERE {where}", f"UPDATE {{t}} SET a = 1 WHERE {where}"])
    )
    return target, statement


@SETTINGS
@given(count_cases())
def test_delete_and_update_counts_match_duckdb(case: tuple[Target, str]) -> None:
    """DELETE's rows_deleted and UPDATE's rows_written are DuckDB's count: rows that existed and changed."""
    check(*case)


def test_delete_of_absent_keys_counts_the_rows_that_existed(local_cat: mere.Catalog) -> None:
    t = local_cat.create_table("a.t", pa.schema([("id", pa.int64()), ("v", pa.int64())]), primary_key="id")
    t.upsert(pa.table({"id": [1, 2], "v": [1, 2]}))
    result = mere.sql("DELETE FROM a.t WHERE id IN (1, 98, 99)", catalog=local_cat)
    assert (result.rows_deleted, result.delete_markers) == (1, 1)
    assert t.current_snapshot().summary["deleted_rows"] == 1
    assert t.delete("id = 77").rows_deleted == 0
    # A delete of given keys is blind (it writes a marker per key, reading nothing): how many of them
    # existed is unknown, and it says so rather than count markers as rows.
    blind = t.delete(pa.table({"id": [2, 3]}))
    assert (blind.rows_deleted, blind.delete_markers) == (None, 2)
    assert t.to_arrow().num_rows == 0


# -- 2. extension types ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "select",
    [
        "SELECT 1 AS id, 'POINT(1 2)'::GEOMETRY AS g",
        "SELECT 1 AS id, ['POINT(1 2)'::GEOMETRY] AS g",
        "SELECT 1 AS id, {'a': 'POINT(1 2)'::GEOMETRY} AS g",
        "SELECT 1 AS id, MAP {'a': 'POINT(1 2)'::GEOMETRY} AS g",
    ],
    ids=["geometry", "list", "struct", "map"],
)
def test_extension_typed_fields_from_duckdb_are_refused(local_cat: mere.Catalog, select: str) -> None:
    """DuckDB hands GEOMETRY over as binary declaring ``geoarrow.wkb``: mere cannot keep every value one
    a geoarrow reader takes (an UPDATE stores text), so create_table refuses it, as documented."""
    data = duckdb.connect().sql(select).to_arrow_table()
    with pytest.raises(errors.UnsupportedType, match=r"geoarrow\.wkb.*CAST\(g AS BLOB\)"):
        local_cat.create_table("a.t", data.schema, primary_key="id")
    assert not local_cat.exists("a.t")


def test_extension_types_declared_or_registered_are_refused(local_cat: mere.Catalog) -> None:
    metadata = {"ARROW:extension:name": "my.ext", "ARROW:extension:metadata": ""}
    with pytest.raises(errors.UnsupportedType, match=r"my\.ext"):
        local_cat.create_table(
            "a.t", pa.schema([("id", pa.int64()), pa.field("x", pa.binary(), metadata=metadata)])
        )
    with pytest.raises(errors.UnsupportedType, match="extension type"):
        local_cat.create_table("a.t", pa.schema([("id", pa.int64()), ("u", pa.uuid())]))


def test_geometry_stored_as_blob_reads_as_duckdb_reads_it(local_cat: mere.Catalog) -> None:
    """The way the refusal points to: the WKB bytes as BLOB. UPDATE then stores what DuckDB stores."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t1 (id BIGINT PRIMARY KEY, g BLOB)")
    con.execute("INSERT INTO t1 SELECT 1, CAST('POINT(1 2)'::GEOMETRY AS BLOB)")
    data = con.sql("SELECT * FROM t1").to_arrow_table()
    t = local_cat.create_table("a.t1", data.schema, primary_key="id")
    t.upsert(data)
    con.register("mere_rows", t.to_arrow())
    assert con.sql("SELECT g::GEOMETRY::VARCHAR FROM mere_rows").fetchall() == [("POINT (1 2)",)]
    con.execute("UPDATE t1 SET g = 'POINT(3 4)'")
    mere.sql("UPDATE a.t1 SET g = 'POINT(3 4)'", catalog=local_cat)
    want = con.sql("SELECT g FROM t1").to_arrow_table().column("g").to_pylist()
    assert t.to_arrow().column("g").to_pylist() == want == [b"POINT(3 4)"]


# -- ``*`` as Spark SQL pairs it (the Spark helper's reading): by name, target-driven -----------------------

STAR_MERGE = (
    "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
)


def star_pairs(target: list[str], source: list[str], star: Any) -> list[dict[str, str]]:
    from mere.statements import MergeStatement, parse_sql

    statement = parse_sql(STAR_MERGE)
    assert isinstance(statement, MergeStatement)
    clauses = statement.spec(target, source, star=star).clauses
    # each value is the source column, qualified (and quoted where its name needs it)
    return [{t: v.removeprefix("s.").strip('"') for t, v in c.assignments} for c in clauses]


@given(
    order=st.permutations(["id", "a", "b"]),
    extra=st.lists(st.sampled_from(["x", "y", "_z"]), unique=True, max_size=2),
    upper=st.sets(st.sampled_from(["a", "b"])),
)
@settings(max_examples=30, deadline=None)
def test_star_by_name_pairs_each_table_column_with_the_source_column_of_its_name(
    order: list[str], extra: list[str], upper: set[str]
) -> None:
    """``star="name"`` (Spark SQL): each table column from the source column of its name, without case, in
    any source order; source columns the table lacks are not read. ``"position"`` (DuckDB) pairs i with i."""
    source = [c.upper() if c in upper else c for c in order] + extra
    for values in star_pairs(["id", "a", "b"], source, "name"):
        assert values == {c: c.upper() if c in upper else c for c in ["id", "a", "b"]}
    if not extra:
        for values in star_pairs(["id", "a", "b"], source, "position"):
            assert values == dict(zip(["id", "a", "b"], source))


def test_star_by_name_refuses_a_missing_or_ambiguous_column_and_a_bad_pairing() -> None:
    with pytest.raises(errors.FilterError, match=r"lacks \['b'\]"):
        star_pairs(["id", "a", "b"], ["id", "a", "x"], "name")
    with pytest.raises(errors.FilterError, match="several columns named"):
        star_pairs(["id", "a"], ["id", "a", "A"], "name")
    with pytest.raises(errors.InvalidInput, match="star must be"):
        star_pairs(["id", "a"], ["id", "a"], "spark")


# -- names without case ---------------------------------------------------------------------------------


def _spelt(draw: st.DrawFn, name: str) -> str:
    """``name`` in a case Hypothesis draws letter by letter."""
    return "".join(c.upper() if draw(st.booleans()) else c.lower() for c in name)


@st.composite
def case_cases(draw: st.DrawFn) -> tuple[Target, str, pa.Table | None]:
    base = draw(targets(values=("a", "Bb")))
    if draw(st.booleans()):  # the table's own spelling of a column differs from the default
        base = Target(("k", "A", "Bb"), base.key, base.rows, base.partition_by)
    k, a, b = (
        (lambda n: _spelt(draw, n), "k"),
        (lambda n: _spelt(draw, n), "a"),
        (lambda n: _spelt(draw, n), "bb"),
    )
    n = {name: spell(name) for spell, name in (k, a, b)}
    t, s = _spelt(draw, "stock"), _spelt(draw, "s")
    form = draw(st.sampled_from(["update", "delete", "merge"]))
    if form == "update":
        return base, f"UPDATE {{t}} SET {n['a']} = {t}.{n['bb']} + 1 WHERE {n['k']} > 2", None
    if form == "delete":
        return base, f"DELETE FROM {{t}} WHERE {n['a']} IS NULL OR {t}.{n['k']} = 3", None
    spelt = [_spelt(draw, c) for c in ("k", "a")]
    keys = draw(st.lists(st.integers(0, 10), min_size=1, max_size=5, unique=True))
    source = source_table(spelt, [(key, draw(VALUE)) for key in keys])
    # Unqualified names: bb only the table has; a and k both have (ambiguous, as DuckDB says, but in
    # WHEN NOT MATCHED, which sees the source only).
    matched = draw(
        st.sampled_from(
            [f"{s}.{_spelt(draw, 'a')} > 0", f"{_spelt(draw, 'bb')} IS NULL", f"{_spelt(draw, 'a')} > 0"]
        )
    )
    statement = (
        f"MERGE INTO {{t}} USING s AS {s} ON {t}.{n['k']} = {s}.{_spelt(draw, 'k')} "
        f"WHEN MATCHED AND {matched} THEN UPDATE SET {n['bb']} = {s}.{_spelt(draw, 'a')} "
        f"WHEN NOT MATCHED THEN INSERT ({n['k']}, {n['a']}) VALUES ({s}.{_spelt(draw, 'k')}, {_spelt(draw, 'a')})"
    )
    return base, statement, source


@SETTINGS
@given(case_cases())
def test_names_in_any_case_run_as_in_duckdb(case: tuple[Target, str, pa.Table | None]) -> None:
    """Column names and aliases in any case name the table's and the source's columns, as DuckDB (and Spark
    SQL) read them; an unqualified name both tables have stays ambiguous."""
    check(*case)
