"""Table-wide keys (``key_scope="table"``): a key names one row of the table, whatever its partition.

The backbone is two properties against a dict keyed by the key alone: random upserts and CDC deletes that
move keys among partitions, in random batches (a key several times in one batch, in several partitions),
with compactions and time travel, equal the model at every version; and with ``sequence_by``, any
permutation and duplication of sequenced events equals the model applied in sequence order. Then: the
spec (default, stored form, older specs), bad input (typed errors, nothing changed), stale counts against
stored versions (and the read-free route of an in-order stream), UPDATE of a partition column, DELETE,
MERGE and UPDATE against DuckDB, the change feed, partial rows, staged writes, and two writers racing to
move the same keys.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.errors import InvalidInput, MereError
from mere.spec import TableSpec
from mere.table import file_keys, stored_keys

SCHEMA = pa.schema([("id", pa.int64()), ("status", pa.string()), ("v", pa.int64())])
CDC = pa.schema([*SCHEMA, ("op", pa.string())])
SEQ = pa.schema([("id", pa.int64()), ("status", pa.string()), ("lsn", pa.int64()), ("v", pa.int64())])
PARTS = ("open", "shipped", "done")


def orders(cat: mere.Catalog, name: str = "o", **kw: Any) -> mere.Table:
    kw.setdefault("buckets", 2)
    schema = kw.pop("schema", CDC)
    if "op" in schema.names:
        kw.setdefault("cdc_column", "op")
    return cat.create_table(name, schema, primary_key="id", partition_by="status", **kw)


def rows_of(t: mere.Table, version: int | None = None) -> dict[int, tuple[str, int]]:
    out: dict[int, tuple[str, int]] = {}
    for r in t.scan(version=version).to_arrow().to_pylist():
        assert r["id"] not in out, f"key {r['id']} in two partitions: {out[r['id']]} and {r}"
        out[r["id"]] = (r["status"], r["v"])
    return out


def cdc(rows: list[tuple[int, str, int | None, str]]) -> pa.Table:
    return pa.table(
        {
            "id": [r[0] for r in rows],
            "status": [r[1] for r in rows],
            "v": [r[2] for r in rows],
            "op": [r[3] for r in rows],
        },
        CDC,
    )


# -- the spec ---------------------------------------------------------------------------------------------


def test_default_scope_and_the_stored_spec(tmp_path: Path) -> None:
    cat = mere.connect(str(tmp_path))
    t = orders(cat)
    assert t.key_scope == "table" and t.spec.cross_partition
    assert "key_scope='table'" in repr(t)
    stored = json.loads(t.spec.to_json())
    assert stored["key_scope"] == "table" and stored["format"] == 4
    # Partition columns inside the key: keys cannot move, the spec stays readable by older mere.
    inside = cat.create_table("k", SCHEMA, primary_key=["id", "status"], partition_by="status")
    assert inside.key_scope == "table" and not inside.spec.cross_partition
    assert json.loads(inside.spec.to_json())["format"] == 1
    # The old identity on request; it is what specs stored before the field read as.
    old = orders(cat, "p", key_scope="partition")
    text = json.loads(old.spec.to_json())
    assert "key_scope" not in text and text["format"] == 1
    assert TableSpec.from_json(json.dumps(text)).key_scope == "partition"
    # Merge operators other than last keep the old identity by default (a move cannot fold columns).
    summed = orders(cat, "s", merge_operators={"v": "sum"})
    assert summed.key_scope == "partition"
    keyless = cat.create_table("l", SCHEMA, partition_by="status")
    assert keyless.key_scope == "partition"
    assert mere.connect(str(tmp_path)).table("o").key_scope == "table"
    # exist_ok: a table stored before the field matches a call that does not name it.
    assert orders(cat, "p", exist_ok=True).key_scope == "partition"
    with pytest.raises(mere.errors.TableExists, match="key_scope"):
        orders(cat, "p", exist_ok=True, key_scope="table")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"key_scope": "global"}, "key_scope must be"),
        ({"key_scope": 1}, "key_scope must be"),
        ({"key_scope": "TABLE"}, "key_scope must be"),
        ({"key_scope": "table", "primary_key": None}, "has none"),
        ({"key_scope": "partition", "primary_key": None}, "has none"),
        ({"key_scope": "table", "merge_operators": {"v": "sum"}}, "cannot combine"),
    ],
)
def test_bad_key_scope_is_refused_and_creates_nothing(
    tmp_path: Path, kwargs: dict[str, Any], match: str
) -> None:
    cat = mere.connect(str(tmp_path))
    args: dict[str, Any] = {"primary_key": "id", "partition_by": "status", **kwargs}
    with pytest.raises(InvalidInput, match=match):
        cat.create_table("bad", SCHEMA, **args)
    assert not cat.exists("bad")


# -- moves ------------------------------------------------------------------------------------------------


def test_an_upsert_moves_a_key_and_a_cdc_delete_finds_it_anywhere(tmp_path: Path) -> None:
    t = orders(mere.connect(str(tmp_path)))
    t.upsert(cdc([(1, "open", 1, "c"), (2, "open", 2, "c"), (3, "open", 3, "c")]))
    r = t.upsert(cdc([(1, "shipped", 10, "u"), (4, "shipped", 4, "c")]))
    assert r.moved_keys == 1 and r.rows_written == 2
    assert rows_of(t) == {1: ("shipped", 10), 2: ("open", 2), 3: ("open", 3), 4: ("shipped", 4)}
    # One batch holding a key in two partitions: the last row wins (its partition's rows after the move).
    t.upsert(cdc([(2, "shipped", 20, "u"), (2, "done", 21, "u"), (5, "done", 50, "c"), (5, "open", 51, "u")]))
    assert rows_of(t) == {
        1: ("shipped", 10),
        2: ("done", 21),
        3: ("open", 3),
        4: ("shipped", 4),
        5: ("open", 51),
    }
    # A CDC delete carrying another partition (or none of the key's) deletes the key where it lives.
    t.upsert(cdc([(1, "open", None, "d"), (3, "done", None, "d")]))
    assert rows_of(t) == {2: ("done", 21), 4: ("shipped", 4), 5: ("open", 51)}
    # delete() of keys given with a partition deletes them wherever they live, too.
    t.delete(pa.table({"id": [2], "status": ["open"]}))
    t.delete(pa.table({"id": [4]}))
    assert rows_of(t) == {5: ("open", 51)}
    # Time travel reads each version as it was.
    assert rows_of(t, 2) == {1: ("shipped", 10), 2: ("open", 2), 3: ("open", 3), 4: ("shipped", 4)}


def test_partition_scope_keeps_one_row_per_key_and_partition(tmp_path: Path) -> None:
    t = orders(mere.connect(str(tmp_path)), key_scope="partition")
    t.upsert(cdc([(1, "open", 1, "c")]))
    r = t.upsert(cdc([(1, "shipped", 2, "u")]))
    assert r.moved_keys == 0
    assert sorted((x["id"], x["status"]) for x in t.to_arrow().to_pylist()) == [(1, "open"), (1, "shipped")]


def test_a_partial_row_cannot_move_a_key(tmp_path: Path) -> None:
    t = orders(mere.connect(str(tmp_path)), schema=SCHEMA)
    t.upsert(pa.table({"id": [1], "status": ["open"], "v": [1]}, SCHEMA))
    version = t.version
    with pytest.raises(InvalidInput, match="partial row"):
        t.upsert(pa.table({"id": [1], "status": ["shipped"]}))
    assert t.version == version and rows_of(t) == {1: ("open", 1)}
    t.upsert(pa.table({"id": [1], "status": ["open"]}))  # a partial row that stays is fine
    assert rows_of(t) == {1: ("open", 1)}


def test_staged_writes_move_keys_on_commit(tmp_path: Path) -> None:
    t = orders(mere.connect(str(tmp_path)))
    t.upsert(cdc([(1, "open", 1, "c"), (2, "open", 2, "c")]))
    first = t.stage(cdc([(1, "shipped", 10, "u")]))
    second = t.stage(cdc([(1, "done", 11, "u"), (2, "done", None, "d")]))
    r = t.commit([first, second])
    assert r.moved_keys >= 1
    assert rows_of(t) == {1: ("done", 11)}


def test_update_of_a_partition_column_moves_the_row(tmp_path: Path) -> None:
    t = orders(mere.connect(str(tmp_path)))
    t.upsert(cdc([(1, "open", 1, "c"), (2, "open", 2, "c"), (3, "done", 3, "c")]))
    t.update({"status": "'shipped'", "v": "v * 10"}, where="id <= 2")
    assert rows_of(t) == {1: ("shipped", 10), 2: ("shipped", 20), 3: ("done", 3)}
    t.delete("status = 'shipped' AND v = 10")
    assert rows_of(t) == {2: ("shipped", 20), 3: ("done", 3)}
    p = orders(mere.connect(str(tmp_path)), "p", key_scope="partition")
    with pytest.raises(InvalidInput, match="partition column"):
        p.update({"status": "'x'"})


def test_the_change_feed_reads_a_move_as_delete_and_insert(tmp_path: Path) -> None:
    t = orders(mere.connect(str(tmp_path)))
    t.upsert(cdc([(1, "open", 1, "c")]))
    t.upsert(cdc([(1, "shipped", 2, "u")]))
    feed = t.changes(1).read_all().to_pylist()
    assert sorted((r["_change"], r["status"], r["v"]) for r in feed) == [
        ("delete", "open", 1),
        ("insert", "shipped", 2),
    ]
    assert {r["_version"] for r in feed} == {2}


def test_merge_matches_and_inserts_table_wide(tmp_path: Path) -> None:
    t = orders(mere.connect(str(tmp_path)), schema=SCHEMA)
    t.upsert(pa.table({"id": [1, 2], "status": ["open", "done"], "v": [1, 2]}, SCHEMA))
    source = pa.table({"id": [1, 3], "status": ["shipped", "open"], "v": [10, 30]}, SCHEMA)
    t.merge(source, on="t.id = s.id").when_matched_update(
        set={"v": "s.v"}
    ).when_not_matched_insert_all().execute()
    assert rows_of(t) == {1: ("open", 10), 2: ("done", 2), 3: ("open", 30)}
    # SET of the partition column (update_all too) moves the matched row.
    t.merge(source, on="t.id = s.id").when_matched_update_all().execute()
    assert rows_of(t) == {1: ("shipped", 10), 2: ("done", 2), 3: ("open", 30)}
    p = orders(mere.connect(str(tmp_path)), "p", schema=SCHEMA, key_scope="partition")
    with pytest.raises(InvalidInput, match="partition column"):
        p.merge(source, on="t.id = s.id").when_matched_update(set={"status": "s.status"}).execute()


# -- against DuckDB ---------------------------------------------------------------------------------------


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    start=st.dictionaries(
        st.integers(0, 12), st.tuples(st.sampled_from(PARTS), st.integers(0, 9)), max_size=10
    ),
    statements=st.lists(
        st.one_of(
            st.tuples(st.just("update"), st.sampled_from(PARTS), st.integers(0, 9)),
            st.tuples(
                st.just("merge"),
                st.dictionaries(
                    st.integers(0, 12), st.tuples(st.sampled_from(PARTS), st.integers(0, 9)), max_size=5
                ),
                st.booleans(),
            ),
            st.tuples(st.just("delete"), st.integers(0, 9), st.just(0)),
        ),
        max_size=4,
    ),
)
def test_merge_update_and_delete_match_duckdb(
    tmp_path_factory: pytest.TempPathFactory, start: dict[int, tuple[str, int]], statements: list[Any]
) -> None:
    cat = mere.connect(str(tmp_path_factory.mktemp("dd")))
    t = orders(cat, schema=SCHEMA)
    db = duckdb.connect()
    db.execute("CREATE TABLE o (id BIGINT PRIMARY KEY, status VARCHAR, v BIGINT)")
    if start:
        data = pa.table(
            {
                "id": list(start),
                "status": [s for s, _ in start.values()],
                "v": [v for _, v in start.values()],
            },
            SCHEMA,
        )
        t.upsert(data)
        db.execute("INSERT INTO o SELECT * FROM data")
    for kind, a, b in statements:
        if kind == "update":  # moves the rows whose v is below a bound to a partition
            t.update({"status": f"'{a}'", "v": "v + 1"}, where=f"v < {b}")
            db.execute(f"UPDATE o SET status = '{a}', v = v + 1 WHERE v < {b}")
        elif kind == "delete":
            t.delete(f"v = {a}")
            db.execute(f"DELETE FROM o WHERE v = {a}")
        else:
            src = pa.table(
                {"id": list(a), "status": [s for s, _ in a.values()], "v": [v for _, v in a.values()]}, SCHEMA
            )
            m = t.merge(src, on="t.id = s.id").when_matched_update(set={"v": "s.v", "status": "s.status"})
            clause = "WHEN MATCHED THEN UPDATE SET v = s.v, status = s.status"
            if b:
                m = m.when_not_matched_insert_all()
                clause += " WHEN NOT MATCHED THEN INSERT (id, status, v) VALUES (s.id, s.status, s.v)"
            m.execute()
            db.execute(f"MERGE INTO o USING src AS s ON o.id = s.id {clause}")
        want = {r[0]: (r[1], r[2]) for r in db.execute("SELECT id, status, v FROM o").fetchall()}
        assert rows_of(t) == want


# -- the properties ---------------------------------------------------------------------------------------

EVENT = st.tuples(st.integers(0, 7), st.sampled_from(PARTS), st.integers(0, 99), st.booleans())


@pytest.fixture(params=["key-index", "read-files", "small-budget"])
def key_index(request: pytest.FixtureRequest) -> Any:
    """Each lookup of stored keys through the per-bucket index, by reading the stored files, or through
    the index where a bucket holds at most 6 rows (the others read: both routes in one commit)."""
    was = stored_keys.KEY_INDEX, stored_keys.INDEX_BYTES
    stored_keys.KEY_INDEX = request.param != "read-files"
    if request.param == "small-budget":
        stored_keys.INDEX_BYTES = 6 * 32
    yield request.param
    stored_keys.KEY_INDEX, stored_keys.INDEX_BYTES = was


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(st.lists(EVENT, min_size=1, max_size=8), min_size=1, max_size=8),
    compact_after=st.sets(st.integers(0, 7)),
    cold_after=st.sets(st.integers(0, 7)),
    buckets=st.integers(1, 3),
)
def test_moves_equal_a_dict_keyed_by_key(
    tmp_path_factory: pytest.TempPathFactory,
    key_index: str,
    batches: list[list[tuple[int, str, int, bool]]],
    compact_after: set[int],
    cold_after: set[int],
    buckets: int,
) -> None:
    t = orders(
        mere.connect(str(tmp_path_factory.mktemp("mv"))),
        buckets=buckets,
        properties={"compaction.auto": "off"},
    )
    model: dict[int, tuple[str, int]] = {}
    seen: list[tuple[int, dict[int, tuple[str, int]]]] = []
    for i, batch in enumerate(batches):
        for key, part, value, delete in batch:
            if delete:
                model.pop(key, None)
            else:
                model[key] = (part, value)
        t.upsert(cdc([(k, p, None if d else v, "d" if d else "u") for k, p, v, d in batch]))
        seen.append((t.version, dict(model)))
        if i in compact_after:
            t.compact()
        if i in cold_after:
            stored_keys.forget()  # as a new process
        assert rows_of(t) == model
    for version, want in seen:
        assert rows_of(t, version) == want


ROW = st.tuples(st.integers(0, 7), st.sampled_from(PARTS), st.integers(0, 99))
STEP = st.one_of(
    st.tuples(st.just("upsert"), st.lists(EVENT, min_size=1, max_size=8)),
    st.tuples(st.just("overwrite"), st.sampled_from(PARTS), st.lists(ROW, max_size=6)),
    st.tuples(st.just("dynamic"), st.lists(ROW, min_size=1, max_size=8)),
    st.tuples(st.just("staged"), st.lists(ROW, min_size=1, max_size=8), st.integers(0, 8)),
    st.tuples(st.just("delete"), st.lists(st.integers(0, 7), min_size=1, max_size=3)),
)


def overwritten(model: dict[int, tuple[str, int]], parts: set[str], rows: list[tuple[int, str, int]]) -> None:
    """The model of an overwrite of ``parts`` with ``rows`` (in order): the keys living there go, and
    each row's key lives in its row's partition (moved from wherever it lived), the last row winning."""
    for k in [k for k, (p, _) in model.items() if p in parts]:
        del model[k]
    for k, p, v in rows:
        model[k] = (p, v)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(STEP, min_size=1, max_size=7),
    compact_after=st.sets(st.integers(0, 6)),
    buckets=st.integers(1, 3),
)
def test_overwrites_move_keys_like_a_dict_keyed_by_key(
    tmp_path_factory: pytest.TempPathFactory,
    key_index: str,
    steps: list[Any],
    compact_after: set[int],
    buckets: int,
) -> None:
    t = orders(
        mere.connect(str(tmp_path_factory.mktemp("ow"))),
        buckets=buckets,
        properties={"compaction.auto": "off"},
    )
    model: dict[int, tuple[str, int]] = {}
    seen: list[tuple[int, dict[int, tuple[str, int]]]] = []
    for i, step in enumerate(steps):
        kind = step[0]
        if kind == "upsert":
            for key, part, value, delete in step[1]:
                if delete:
                    model.pop(key, None)
                else:
                    model[key] = (part, value)
            t.upsert(cdc([(k, p, None if d else v, "d" if d else "u") for k, p, v, d in step[1]]))
        elif kind == "overwrite":
            rows = [(k, step[1], v) for k, _, v in step[2]]
            overwritten(model, {step[1]}, rows)
            t.overwrite(cdc([(k, p, v, "c") for k, p, v in rows]), partition={"status": step[1]})
        elif kind == "dynamic":
            overwritten(model, {p for _, p, _ in step[1]}, step[1])
            t.overwrite(cdc([(k, p, v, "c") for k, p, v in step[1]]), dynamic=True)
        elif kind == "staged":  # a distributed dynamic overwrite (Spark's path): two tasks, later wins
            rows, cut = step[1], min(step[2], len(step[1]))
            overwritten(model, {p for _, p, _ in rows}, rows)
            stages = [
                t.stage(cdc([(k, p, v, "c") for k, p, v in part]), "overwrite")
                for part in (rows[:cut], rows[cut:])
            ]
            t.commit([s for s in stages if s.files], operation="overwrite", dynamic=True)
        else:
            for k in step[1]:
                model.pop(k, None)
            t.delete(pa.table({"id": pa.array(step[1], pa.int64())}))
        seen.append((t.version, dict(model)))
        if i in compact_after:
            t.compact()
        assert rows_of(t) == model, step
    for version, want in seen:
        assert rows_of(t, version) == want


def test_an_overwrite_moves_keys_and_a_sequence_decides_against_other_partitions(tmp_path: Path) -> None:
    t = orders(mere.connect(str(tmp_path)), schema=SEQ_CDC, sequence_by="lsn")
    t.upsert(seq_rows([(1, "open", 5, False), (2, "open", 5, False), (3, "done", 5, False)]))
    r = t.overwrite(
        seq_rows([(1, "shipped", 6, False), (2, "shipped", 4, False)]), partition={"status": "shipped"}
    )
    # 1 moves (newer: a marker in 'open'); 2 at 4 is older than its version in 'open': it loses (a marker
    # beside it) and counts as stale.
    assert r.moved_keys == 2 and r.stale_rows == 1
    assert rows_of_seq(t) == {1: ("shipped", 60), 2: ("open", 50), 3: ("done", 50)}
    # An overwrite of the partition a key moved to leaves it nowhere: its old version stays hidden.
    t.overwrite(seq_rows([(3, "shipped", 7, False)]), partition={"status": "shipped"})
    assert rows_of_seq(t) == {2: ("open", 50), 3: ("shipped", 70)}
    r = t.upsert(seq_rows([(1, "done", 5, False)]))  # late: older than the moved version's marker
    assert r.stale_rows == 1 and 1 not in rows_of_seq(t)


SEQ_CDC = pa.schema([*SEQ, ("op", pa.string())])


def seq_rows(events: list[tuple[int, str, int, bool]]) -> pa.Table:
    return pa.table(
        {
            "id": [e[0] for e in events],
            "status": [e[1] for e in events],
            "lsn": [e[2] for e in events],
            "v": [None if e[3] else e[2] * 10 for e in events],
            "op": ["d" if e[3] else "u" for e in events],
        },
        SEQ_CDC,
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), buckets=st.integers(1, 3))
def test_sequenced_moves_in_any_order_equal_the_model_in_sequence_order(
    tmp_path_factory: pytest.TempPathFactory, key_index: str, data: st.DataObject, buckets: int
) -> None:
    # Distinct sequences: each event (key, partition, sequence, delete) is one; duplicates are replays.
    events = data.draw(
        st.lists(
            st.tuples(st.integers(0, 5), st.sampled_from(PARTS), st.integers(1, 10_000), st.booleans()),
            min_size=1,
            max_size=20,
            unique_by=lambda e: e[2],
        )
    )
    replays = data.draw(st.lists(st.sampled_from(events), max_size=6))
    stream = data.draw(st.permutations(events + replays))
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(stream) - 1)), max_size=4)))
    compact_after = data.draw(st.sets(st.integers(0, 5)))
    cold_after = data.draw(st.sets(st.integers(0, 5)))
    t = orders(
        mere.connect(str(tmp_path_factory.mktemp("sq"))),
        schema=SEQ_CDC,
        buckets=buckets,
        sequence_by="lsn",
        properties={"compaction.auto": "off"},
    )
    applied: list[tuple[int, str, int, bool]] = []
    seen = []
    for i, (lo, hi) in enumerate(zip([0, *cuts], [*cuts, len(stream)])):
        batch = stream[lo:hi]
        if not batch:
            continue
        t.upsert(seq_rows(batch))
        applied += batch
        newest: dict[int, tuple[int, str, int, bool]] = {}
        for e in applied:
            if e[0] not in newest or e[2] > newest[e[0]][2]:
                newest[e[0]] = e
        model = {k: (e[1], e[2] * 10) for k, e in newest.items() if not e[3]}
        got = {k: (s, v) for k, (s, v) in rows_of_seq(t).items()}
        assert got == model
        seen.append((t.version, model))
        if i in compact_after:
            t.compact()
        if i in cold_after:
            stored_keys.forget()  # as a new process
    for version, want in seen:
        assert rows_of_seq(t, version) == want


def rows_of_seq(t: mere.Table, version: int | None = None) -> dict[int, tuple[str, int]]:
    out: dict[int, tuple[str, int]] = {}
    for r in t.scan(version=version).to_arrow().to_pylist():
        assert r["id"] not in out, f"key {r['id']} in two partitions"
        out[r["id"]] = (r["status"], r["v"])
    return out


# -- stale counts -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("scope", ["table", "partition"])
def test_stale_rows_count_rows_older_than_the_stored_version(tmp_path: Path, scope: str) -> None:
    t = orders(mere.connect(str(tmp_path)), schema=SEQ_CDC, sequence_by="lsn", key_scope=scope)
    assert t.upsert(seq_rows([(1, "open", 5, False), (2, "open", 5, False)])).stale_rows == 0
    # In the key's partition: 1 at 3 is older than the stored 5; 2 at 4 and 6 in one batch: 4 replaced.
    r = t.upsert(seq_rows([(1, "open", 3, False), (2, "open", 4, False), (2, "open", 6, False)]))
    assert r.stale_rows == 2
    # A replay of the stored version (equal sequence) is not stale.
    assert t.upsert(seq_rows([(2, "open", 6, False)])).stale_rows == 0
    # In another partition: stale where keys are table-wide only.
    r = t.upsert(seq_rows([(1, "done", 4, False)]))
    assert r.stale_rows == (1 if scope == "table" else 0)
    # An event older than the key's delete is stale too, and does not bring the key back.
    t.upsert(seq_rows([(2, "open", 9, True)]))
    r = t.upsert(seq_rows([(2, "open", 7, False)]))
    assert r.stale_rows == 1
    assert 2 not in t.to_arrow().column("id").to_pylist()


def test_an_in_order_stream_counts_no_stale_row_without_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = orders(mere.connect(str(tmp_path)), schema=SEQ_CDC, sequence_by="lsn", key_scope="partition")
    t.upsert(seq_rows([(k, "open", k, False) for k in range(20)]))
    reads: list[str] = []
    original = t.storage.read_row_groups

    def counting(path: str, *args: Any, **kwargs: Any) -> Any:
        reads.append(path)
        return original(path, *args, **kwargs)

    monkeypatch.setattr(t.storage, "read_row_groups", counting)
    r = t.upsert(seq_rows([(k, "open", 100 + k, False) for k in range(20)]))
    assert r.stale_rows == 0
    assert reads == []  # statistics settled it
    r = t.upsert(seq_rows([(3, "open", 1, False)]))
    assert r.stale_rows == 1 and reads == []  # out of order: looked up in the keys the writer kept
    file_keys._cache.clear()  # as another process would: the key's split is read
    stored_keys._index.clear()
    r = t.upsert(seq_rows([(4, "open", 2, False)]))
    assert r.stale_rows == 1 and reads


# -- concurrency ------------------------------------------------------------------------------------------


def test_two_writers_moving_the_same_keys_leave_one_row_per_key(tmp_path: Path) -> None:
    root = str(tmp_path)
    orders(mere.connect(root), schema=SCHEMA, properties={"compaction.auto": "off"})
    results: dict[str, list[tuple[int, list[int]]]] = {"open": [], "shipped": []}
    errors: list[BaseException] = []

    def writer(part: str) -> None:
        t = mere.connect(root).table("o")
        try:
            for i in range(6):
                keys = [k for k in range(10) if (k + i) % 2 == 0 or part == "open"]
                data = pa.table({"id": keys, "status": [part] * len(keys), "v": [i] * len(keys)}, SCHEMA)
                r = t.upsert(data)
                results[part].append((r.version, keys))
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(p,)) for p in results]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    t = mere.connect(root).table("o")
    got = rows_of(t)
    last: dict[int, tuple[int, str]] = {}
    for part, commits in results.items():
        for version, keys in commits:
            for k in keys:
                if k not in last or version > last[k][0]:
                    last[k] = (version, part)
    assert {k: s for k, (s, _) in got.items()} == {k: p for k, (_, p) in last.items()}


def test_errors_are_mere_errors(tmp_path: Path) -> None:
    with pytest.raises(MereError):
        orders(mere.connect(str(tmp_path)), key_scope=["table"])


def test_sequenced_update_and_merge_moves_stay_where_they_moved(tmp_path: Path) -> None:
    t = orders(mere.connect(str(tmp_path)), schema=SEQ_CDC, sequence_by="lsn")
    t.upsert(seq_rows([(1, "open", 5, False), (2, "open", 5, False)]))
    t.update({"status": "'shipped'"}, where="id = 1")
    assert rows_of_seq(t) == {1: ("shipped", 50), 2: ("open", 50)}
    r = t.upsert(seq_rows([(1, "open", 4, False)]))  # late: loses to the moved row
    assert r.stale_rows == 1 and rows_of_seq(t) == {1: ("shipped", 50), 2: ("open", 50)}
    t.upsert(seq_rows([(1, "done", 6, False)]))
    assert rows_of_seq(t)[1] == ("done", 60)
    source = pa.table({"id": [2], "status": ["done"], "lsn": [5], "v": [7]})
    t.merge(source, on="t.id = s.id").when_matched_update_all().execute()
    assert rows_of_seq(t) == {1: ("done", 60), 2: ("done", 7)}
    r = t.upsert(seq_rows([(2, "open", 3, False), (3, "open", 1, False)]))
    assert r.stale_rows == 1 and rows_of_seq(t) == {1: ("done", 60), 2: ("done", 7), 3: ("open", 10)}


def test_a_stream_of_upserts_folds_each_commit_into_the_bucket_index(tmp_path: Path) -> None:
    """The index is what the lookups use (not a silent fall back to reading): each bucket's holds the
    files stored when the last commit looked up, and one row per (key, partition)'s current version."""
    stored_keys.forget()  # as a new process
    t = orders(mere.connect(str(tmp_path)), buckets=2, properties={"compaction.auto": "off"})
    t.upsert(cdc([(k, PARTS[k % 3], k, "u") for k in range(40)]))
    t.upsert(cdc([(k, PARTS[(k + 1) % 3], -k, "u") for k in range(0, 40, 4)]))  # 10 keys move
    t.upsert(cdc([(k, "open", None, "d") for k in range(1, 40, 8)]))  # 5 deletes, found anywhere
    stored = t.files().num_rows
    t.upsert(cdc([(1000 + b, "open", 0, "u") for b in range(8)]))  # its lookup folds the files above in
    mine = [ix for (where, _), ix in stored_keys._key_index.items() if str(tmp_path) in where]
    assert len(mine) == 2 and sum(len(ix.files) for ix in mine) == stored
    # 40 first versions; 10 in the partitions keys moved to (their markers replace the old versions);
    # deletes of 1, 17 and 25 in 'open', where they did not live (9 and 33 did: replaced)
    assert sum(ix.rows.num_rows for ix in mine if ix.rows is not None) == 40 + 10 + 3
    want = {k: ((PARTS[(k + 1) % 3], -k) if k % 4 == 0 else (PARTS[k % 3], k)) for k in range(40)}
    assert rows_of(t) == {
        **{k: v for k, v in want.items() if k % 8 != 1},
        **{1000 + b: ("open", 0) for b in range(8)},
    }
