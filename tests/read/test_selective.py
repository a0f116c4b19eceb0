"""The selective route of non-key filters (:mod:`mere.read.selective`): a filter evaluated on every stored
version first, then only the candidates' versions merged, must keep exactly the rows the plain route keeps
(merge everything, then filter) and those a dict model keeps: after updates that move a row out of and
into the filter, deletes by key and by filter, compaction, and at earlier versions. Both markings are
covered (the semi-join of the candidates and the marking of every row), so are tables with
``sequence_by`` and ``first_row`` tables, and the merges it leaves to the plain route."""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
import test_differential as differential
from mere.errors import InvalidInput
from mere.read import selective
from mere.read.newest_wins import newest_wins
from mere.read.planner import Explain
from mere.read.reader import SplitReader
from mere.spec import OP_COLUMN, OP_DELETE, TableSpec

pytestmark = pytest.mark.usefixtures("strings_read_as_dictionaries")

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("v", pa.int64()),
        pa.field("s", pa.string()),
        pa.field("seq", pa.int64()),
    ]
)
WORDS = ["a", "b", "c", None]


@pytest.fixture(params=[(0.0, False), (1.0, False), (1.0, True)], ids=["mark-all", "semi-join", "search"])
def share(request: pytest.FixtureRequest) -> Iterator[float]:
    """Every row marked (no candidate is few enough), the candidates' versions alone, or (where the table
    allows it) the candidates' keys searched in later files."""
    saved = selective.CANDIDATE_SHARE, selective.SEARCH_LATER
    selective.CANDIDATE_SHARE, selective.SEARCH_LATER = request.param
    yield request.param[0]
    selective.CANDIDATE_SHARE, selective.SEARCH_LATER = saved


def plain(scan: Any) -> pa.Table:
    """The scan read by the plain route (merge everything, then filter)."""
    saved = selective.MAX_NARROW_BYTES
    selective.MAX_NARROW_BYTES = -1
    try:
        return scan.to_arrow()
    finally:
        selective.MAX_NARROW_BYTES = saved


def rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


FILTERS = [
    "v < {x}",
    "v >= {x} and s = '{w}'",
    "s = '{w}' or v is null",
    "v is null",
    "not (v < {x})",
    "id > {x} or v = {x}",
    "v + id > {x}",
    "s in ('{w}', 'c') and v <> {x}",
]


def holds(f: str, r: dict[str, Any], x: int, w: str) -> bool:
    """The filter templates in Python, with SQL's NULL logic (NULL is not TRUE)."""
    v, s, k = r["v"], r["s"], r["id"]
    if f == "v < {x}":
        return v is not None and v < x
    if f == "v >= {x} and s = '{w}'":
        return v is not None and v >= x and s == w
    if f == "s = '{w}' or v is null":
        return s == w or v is None
    if f == "v is null":
        return v is None
    if f == "not (v < {x})":
        return v is not None and not v < x
    if f == "id > {x} or v = {x}":
        return k > x or (v is not None and v == x)
    if f == "v + id > {x}":
        return v is not None and v + k > x
    assert f == "s in ('{w}', 'c') and v <> {x}"
    return s in (w, "c") and v is not None and v != x


row_st = st.fixed_dictionaries(
    {
        "id": st.integers(0, 30),
        "v": st.one_of(st.none(), st.integers(-5, 5)),
        "s": st.sampled_from(WORDS),
        "seq": st.integers(0, 3),
    }
)
step_st = st.one_of(
    st.tuples(st.just("upsert"), st.lists(row_st, min_size=1, max_size=12)),
    st.tuples(st.just("delete_keys"), st.lists(st.integers(0, 30), min_size=1, max_size=5)),
    st.tuples(st.just("delete_where"), st.integers(-5, 5)),
    st.tuples(st.just("update"), st.integers(-5, 5)),
    st.tuples(st.just("compact"), st.none()),
)
check_st = st.tuples(st.sampled_from(FILTERS), st.integers(-6, 6), st.sampled_from(["a", "b", "c"]))

SETTINGS = settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def apply(t: mere.Table, model: dict[int, dict[str, Any]], step: tuple[str, Any]) -> None:
    """One write, to the table and to the model of a newest-wins table."""
    kind, arg = step
    if kind == "upsert":
        batch: dict[int, dict[str, Any]] = {}
        for r in arg:
            batch[r["id"]] = r  # the last row of a key in a batch wins
        t.upsert(pa.Table.from_pylist(list(batch.values()), schema=SCHEMA))
        model.update(batch)
    elif kind == "delete_keys":
        t.delete(f"id in ({', '.join(map(str, arg))})")
        for k in arg:
            model.pop(k, None)
    elif kind == "delete_where":
        t.delete(f"v < {arg}")
        for k in [k for k, r in model.items() if r["v"] is not None and r["v"] < arg]:
            del model[k]
    elif kind == "update":  # moves rows into and out of the filters: v changes, s too
        t.update(set={"v": "v + 3", "s": "'c'"}, where=f"v >= {arg}")
        for r in model.values():
            if r["v"] is not None and r["v"] >= arg:
                r["v"] += 3
                r["s"] = "c"
    else:
        t.compact()


@pytest.mark.parametrize("buckets", [1, 2])
@SETTINGS
@given(steps=st.lists(step_st, min_size=1, max_size=7), checks=st.lists(check_st, min_size=1, max_size=4))
def test_newest_wins_matches_the_model_and_the_plain_route(
    tmp_path_factory: pytest.TempPathFactory,
    share: float,
    buckets: int,
    steps: list[tuple[str, Any]],
    checks: list[tuple[str, int, str]],
) -> None:
    cat = mere.connect(str(tmp_path_factory.mktemp("wh")))
    t = cat.create_table(
        "s.t", SCHEMA, primary_key="id", buckets=buckets, properties={"write.row-group-rows": "4"}
    )
    model: dict[int, dict[str, Any]] = {}
    history: list[tuple[int, dict[int, dict[str, Any]]]] = []
    for step in steps:
        apply(t, model, step)
        history.append((t.version, {k: dict(r) for k, r in model.items()}))
    for f, x, w in checks:
        text = f.format(x=x, w=w)
        for version, state in [history[-1], history[0]]:  # now, and by time travel
            scan = t.scan(filter=text, version=version)
            want = sorted((r for r in state.values() if holds(f, r, x, w)), key=lambda r: r["id"])
            got = scan.to_arrow()
            assert rows(got) == want, (text, version)
            assert rows(plain(scan)) == want
            assert scan.count() == len(want)
            assert rows(scan.select("id").to_arrow()) == [{"id": r["id"]} for r in want]


@pytest.mark.parametrize(
    "options",
    [{"sequence_by": "seq"}, {"merge_operators": "first_row"}],
    ids=["sequence_by", "first_row"],
)
@SETTINGS
@given(steps=st.lists(step_st, min_size=1, max_size=6), checks=st.lists(check_st, min_size=1, max_size=4))
def test_other_orders_agree_with_the_plain_route(
    tmp_path_factory: pytest.TempPathFactory,
    share: float,
    options: dict[str, Any],
    steps: list[tuple[str, Any]],
    checks: list[tuple[str, int, str]],
) -> None:
    cat = mere.connect(str(tmp_path_factory.mktemp("wh")))
    t = cat.create_table("s.t", SCHEMA, primary_key="id", buckets=2, **options)
    versions = []
    for step in steps:
        with contextlib.suppress(InvalidInput):  # first_row tables refuse deletes
            apply(t, {}, step)
        versions.append(t.version)
    for f, x, w in checks:
        for version in (versions[-1], versions[0]):
            scan = t.scan(filter=f.format(x=x, w=w), version=version)
            assert rows(scan.to_arrow()) == rows(plain(scan)), (f, version)


def readers(scan: Any) -> list[SplitReader]:
    splits, opts = scan.planned(Explain(scan.version))
    return [SplitReader(scan.table.storage, scan.spec, s, opts) for s in splits]


def test_the_route_is_taken_and_explained(tmp_path: Any) -> None:
    t = mere.connect(str(tmp_path)).create_table("s.t", SCHEMA, primary_key="id")
    t.upsert(
        pa.Table.from_pylist([{"id": i, "v": i % 7, "s": "a", "seq": 0} for i in range(50)], schema=SCHEMA)
    )
    t.upsert(
        pa.Table.from_pylist([{"id": i, "v": 9, "s": "b", "seq": 1} for i in range(0, 50, 5)], schema=SCHEMA)
    )
    scan = t.scan(filter="v = 9")
    assert all(r.selective() for r in readers(scan))
    assert "selective" in str(scan.explain())
    assert sorted(r["id"] for r in scan.to_arrow().to_pylist()) == list(range(0, 50, 5))
    # Key filters, no filter, and key lookups keep their routes.
    assert not any(r.selective() for r in readers(t.scan(filter="id > 3")))
    assert not any(r.selective() for r in readers(t.scan()))
    assert not any(r.selective() for r in readers(t.scan(filter="id = 3 and v = 1")))


def test_merges_of_other_operators_take_the_plain_route(tmp_path: Any) -> None:
    t = mere.connect(str(tmp_path)).create_table(
        "s.t", SCHEMA, primary_key="id", merge_operators={"v": "sum"}
    )
    t.upsert(pa.Table.from_pylist([{"id": 1, "v": 1, "s": "a", "seq": 0}], schema=SCHEMA))
    t.upsert(pa.Table.from_pylist([{"id": 1, "v": 5, "s": "a", "seq": 0}], schema=SCHEMA))
    scan = t.scan(filter="v = 6")
    assert not any(r.selective() for r in readers(scan))
    assert scan.to_arrow().column("v").to_pylist() == [6]
    # A filter on the sum only: the stored versions (1 and 5) never match, the merged row does.
    assert t.scan(filter="v > 5").count() == 1


def test_a_filter_failing_on_a_replaced_version_falls_back(tmp_path: Any) -> None:
    t = mere.connect(str(tmp_path)).create_table("s.t", SCHEMA, primary_key="id")
    t.upsert(pa.Table.from_pylist([{"id": 1, "v": 2**62, "s": "a", "seq": 0}], schema=SCHEMA))
    t.upsert(pa.Table.from_pylist([{"id": 1, "v": 1, "s": "a", "seq": 0}], schema=SCHEMA))
    # v * 4 overflows on the replaced version only: the merged row decides, as in the plain route.
    assert t.scan(filter="v * 4 = 4").to_arrow().column("id").to_pylist() == [1]


def test_an_old_matching_version_never_comes_back(tmp_path: Any, share: float) -> None:
    t = mere.connect(str(tmp_path)).create_table(
        "s.t", SCHEMA, primary_key="id", properties={"write.row-group-rows": "2"}
    )
    t.upsert(pa.Table.from_pylist([{"id": i, "v": 0, "s": "a", "seq": 0} for i in range(10)], schema=SCHEMA))
    t.upsert(
        pa.Table.from_pylist([{"id": i, "v": 1, "s": "a", "seq": 0} for i in range(0, 10, 2)], schema=SCHEMA)
    )
    t.delete("id in (1, 3)")
    got = t.scan(filter="v = 0").to_arrow().column("id").to_pylist()
    assert sorted(got) == [5, 7, 9]
    assert sorted(t.scan(filter="v = 1").to_arrow().column("id").to_pylist()) == [0, 2, 4, 6, 8]


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_filters_match_duckdb_on_both_markings(
    tmp_path_factory: pytest.TempPathFactory, share: float, data: st.DataObject
) -> None:
    """The differential test's random filters (every column type, NULLs, NaN, IN lists, key and non-key
    columns) over merged tables, with DuckDB over the model's rows as the oracle: under each marking."""
    tdef = data.draw(differential.table_defs(), label="table")
    differential.test_filters_match_duckdb.hypothesis.inner_test(tmp_path_factory, tdef, data)


file_st = st.lists(
    st.tuples(st.integers(0, 12), st.sampled_from([0, 0, 0, OP_DELETE]), st.booleans()),
    min_size=0,
    max_size=10,
)


@settings(max_examples=200, deadline=None)
@given(files=st.lists(file_st, min_size=1, max_size=5))
def test_the_search_of_later_files_marks_as_the_merge(files: list[list[tuple[int, int, bool]]]) -> None:
    """``_newest_by_search`` against the merge's marking (``newest_wins``) on random files of sorted keys:
    keys repeated within a file and across files, delete markers, matches anywhere."""
    spec = TableSpec(schema=SCHEMA, primary_key=("id",))
    narrow = []
    for rows_ in files:
        rows_ = sorted(rows_, key=lambda r: r[0])  # a file's rows sorted by key; equal keys keep their order
        keys = pa.table(
            {
                "id": pa.array([r[0] for r in rows_], pa.int64()),
                OP_COLUMN: pa.array([r[1] for r in rows_], pa.int8()),
            }
        )
        narrow.append(selective._Narrow(None, keys, None, np.array([r[2] for r in rows_], dtype=bool), None))
    narrow = [f for f in narrow if f.keys.num_rows]
    if not narrow:
        return
    got = selective._newest_by_search(spec, narrow)
    assert got is not None
    ops = np.concatenate([f.ops for f in narrow])
    match = np.concatenate([f.match for f in narrow])
    winner = newest_wins(
        [np.concatenate([f.keys.column("id").to_numpy() for f in narrow])], ops, narrow[0].keys.num_rows
    )
    assert np.concatenate(got).tolist() == (winner & match).tolist()


WIDE_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("v", pa.int64()),
        pa.field("s", pa.string()),  # few values: stored as a dictionary, read as one
        pa.field("text", pa.string()),  # a value per row
        pa.field("f", pa.float64()),
        pa.field("day", pa.date32()),
    ]
)
wide_row_st = st.fixed_dictionaries(
    {
        "id": st.integers(0, 40),
        "v": st.one_of(st.none(), st.integers(-5, 5)),
        "s": st.sampled_from(WORDS),
        "text": st.one_of(st.none(), st.text("xyz", max_size=6)),
        "f": st.one_of(st.none(), st.floats(-2, 2, allow_nan=False)),
        "day": st.one_of(st.none(), st.dates(datetime.date(1970, 1, 1), datetime.date(2099, 12, 31))),
    }
)


@pytest.mark.parametrize("run_rows", [1, 2, 5, 1 << 17])
@SETTINGS
@given(
    batches=st.lists(st.lists(wide_row_st, min_size=1, max_size=25), min_size=1, max_size=5),
    group_rows=st.integers(1, 4),
    deletes=st.lists(st.integers(0, 40), max_size=4),
    x=st.integers(-5, 5),
    low=st.integers(0, 40),
)
def test_the_wide_pass_by_runs_of_row_groups(
    tmp_path_factory: pytest.TempPathFactory,
    run_rows: int,
    batches: list[list[dict[str, Any]]],
    group_rows: int,
    deletes: list[int],
    x: int,
    low: int,
) -> None:
    """The wide pass decodes runs of row groups (``WIDE_RUN_ROWS`` rows, at least one group) and keeps the
    survivors of each: runs cut inside and between files, row groups with no survivor, rows dropped by a
    key filter before the merge; the other columns come back with the table's types, NULLs kept."""
    t = mere.connect(str(tmp_path_factory.mktemp("wide"))).create_table(
        "s.t",
        WIDE_SCHEMA,
        primary_key="id",
        properties={"write.row-group-rows": str(group_rows), "compaction.auto": "off"},
    )
    model: dict[int, dict[str, Any]] = {}
    for batch in batches:
        last = {r["id"]: r for r in batch}
        t.upsert(pa.Table.from_pylist(list(last.values()), schema=WIDE_SCHEMA))
        model.update(last)
    if deletes:
        t.delete(f"id in ({', '.join(map(str, deletes))})")
        for k in deletes:
            model.pop(k, None)
    saved = selective.WIDE_RUN_ROWS
    selective.WIDE_RUN_ROWS = run_rows
    try:
        for text, keep in [
            (f"v < {x}", lambda r: r["v"] is not None and r["v"] < x),
            (f"id >= {low} and v >= {x}", lambda r: r["id"] >= low and r["v"] is not None and r["v"] >= x),
        ]:
            scan = t.scan(filter=text)
            got = scan.to_arrow()
            assert got.schema.equals(WIDE_SCHEMA), text
            want = sorted((r for r in model.values() if keep(r)), key=lambda r: r["id"])
            assert rows(got) == want, text
            assert rows(plain(scan)) == want
    finally:
        selective.WIDE_RUN_ROWS = saved


@given(
    chunks=st.lists(
        st.lists(st.one_of(st.none(), st.sampled_from(["a", "b", "c", "dd", "é"])), min_size=0, max_size=12),
        min_size=1,
        max_size=6,
    ),
    data=st.data(),
)
def test_taking_rows_from_dictionary_chunks_equals_taking_plain_rows(
    chunks: list[list[Any]], data: Any
) -> None:
    """A column read as dictionaries (a chunk per row group, each its own dictionary) beside plain ones:
    the rows taken chunk by chunk are those a plain take gives."""
    dictionary = pa.chunked_array(
        [pa.array(c, pa.string()).dictionary_encode() for c in chunks],
        type=pa.dictionary(pa.int32(), pa.string()),
    )
    n = len(dictionary)
    table = pa.table({"d": dictionary, "v": pa.array(range(n), pa.int64())})
    where = np.asarray(
        sorted(data.draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=20) if n else st.just([])))
    )
    got = selective._take_sorted(table, where.astype(np.int64))
    plain = table.set_column(0, "d", dictionary.cast(pa.string()))
    want = plain.take(pa.array(where, pa.int64()))
    assert got.schema == table.schema
    assert got.set_column(0, "d", got.column("d").cast(pa.string())).equals(want)
