"""Trial 53: one merged table read by every engine, against ``scan().to_arrow()`` and a dict model.

Hypothesis draws histories of a table with table-wide keys and a partition column outside the key (upserts
with overlapping keys that move keys between partitions, partial upserts, key and non-key deletes,
compaction, a tag) with a schema change in the middle (an added column with a default, a widened int, a
renamed column), and of a table with merge operators (``sum``, ``max``) under partial upserts and deletes.
DuckDB, Polars, Dask, Ray and PyTorch read the same versions with their own filters and projections (on
non-key, renamed and added columns) and their own row counts; each must equal the model, and no non-key
filter may bring back an older version of a key. Bad arguments to each entry point are typed MereErrors
that change nothing.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import mere
from mere.errors import MereError

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    pytest.mark.filterwarnings("ignore:Use 'expr' instead of 'fn':UserWarning"),
]

MANUAL = {"compaction.auto": "off", "retention.max-age": "off", "write.row-group-rows": "4"}
PARTS = ["a", "b", "c"]
NAMES = ["x", "y", None]
OLD = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("p", pa.string()),
        ("qty", pa.int32()),
        ("name", pa.string()),
    ]
)
NEW = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("p", pa.string()),
        ("qty", pa.int64()),
        ("label", pa.string()),
        ("extra", pa.int64()),
    ]
)
AGG = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("tot", pa.int64()),
        ("hi", pa.int32()),
        ("note", pa.string()),
    ]
)

# no shrinking: each example builds a table and starts every engine (seconds); failures print the example
FAST = [Phase.explicit, Phase.reuse, Phase.generate]
ids = st.integers(0, 11)
qtys = st.one_of(st.none(), st.integers(-3, 20))
full_row = st.tuples(
    ids, st.sampled_from(PARTS), qtys, st.sampled_from(NAMES), st.one_of(st.none(), st.integers(0, 9))
)
op = st.one_of(
    st.tuples(st.just("upsert"), st.lists(full_row, min_size=1, max_size=8)),
    st.tuples(
        st.just("partial"), st.lists(st.tuples(ids, st.sampled_from(PARTS), qtys), min_size=1, max_size=5)
    ),
    st.tuples(st.just("delete_keys"), st.lists(ids, min_size=1, max_size=4)),
    st.tuples(st.just("delete_where"), st.integers(0, 15)),
    st.tuples(st.just("compact"), st.none()),
    st.tuples(st.just("tag"), st.none()),
)
histories = st.tuples(st.lists(op, min_size=1, max_size=5), st.lists(op, min_size=1, max_size=5))


class MoveLake:
    """A table with table-wide keys, its model at each version, and the columns each version has."""

    def __init__(self, before: list[Any], after: list[Any]) -> None:
        self.catalog = mere.connect(tempfile.mkdtemp(prefix="t53-"))
        t = self.t = self.catalog.create_table(
            "t53.moves",
            OLD,
            primary_key="id",
            partition_by="p",
            buckets=2,
            key_scope="table",
            properties=MANUAL,
        )
        self.model: dict[int, dict[str, Any]] = {}
        self.models: dict[int, tuple[list[str], dict[int, dict[str, Any]]]] = {}
        self.tags: dict[str, int] = {}
        self.evolved = False
        for o in before:
            self.apply(o)
        with t.evolve() as e:
            e.add_column("extra", pa.int64(), default=7)
            e.widen("qty", pa.int64())
            e.rename_column("name", "label")
        self.evolved = True
        for r in self.model.values():
            r["extra"] = 7
        self.snap()
        for o in after:
            self.apply(o)

    @property
    def names(self) -> list[str]:
        return NEW.names if self.evolved else OLD.names

    def snap(self) -> None:
        self.models[self.t.version] = (self.names, {k: dict(r) for k, r in self.model.items()})

    def apply(self, o: tuple[str, Any]) -> None:
        kind, arg = o
        t, model = self.t, self.model
        if kind == "upsert":
            rows = []
            for i, p, q, n, x in arg:
                r = {"id": i, "p": p, "qty": q, "name": n}
                if self.evolved:
                    r["extra"] = x
                rows.append(r)
                model[i] = dict(r)
            data = [{("label" if c == "name" and self.evolved else c): v for c, v in r.items()} for r in rows]
            t.upsert(pa.Table.from_pylist(data, schema=NEW if self.evolved else OLD))
        elif kind == "partial":
            rows = []
            for i, p, q in arg:
                # a partial row may not move a key: it stays in the key's partition
                p = model[i]["p"] if i in model else p
                rows.append({"id": i, "p": p, "qty": q})
                base = model.get(i) or {"name": None, **({"extra": None} if self.evolved else {})}
                model[i] = {**base, "id": i, "p": p, "qty": q}
            schema = NEW if self.evolved else OLD
            t.upsert(
                pa.Table.from_pylist(rows, schema=pa.schema([schema.field(c) for c in ("id", "p", "qty")]))
            )
        elif kind == "delete_keys":
            t.delete(pa.table({"id": pa.array(arg, pa.int64())}))
            for i in arg:
                model.pop(i, None)
        elif kind == "delete_where":
            t.delete(f"qty > {arg}")
            for i in [i for i, r in model.items() if r["qty"] is not None and r["qty"] > arg]:
                del model[i]
        elif kind == "compact":
            t.compact(min_files=1)
        elif kind == "tag":
            name = f"tag{len(self.tags)}"
            t.tag(name)
            self.tags[name] = t.version
        self.snap()

    def rows(
        self, version: int, keep: Any = None, columns: list[str] | None = None
    ) -> dict[int, tuple[Any, ...]]:
        names, model = self.models[version]
        columns = columns or names
        out = {}
        for r in model.values():
            named = {("label" if c == "name" and "label" in names else c): v for c, v in r.items()}
            if keep is None or keep(named):
                out[r["id"]] = tuple(named[c] for c in columns)
        return out


def rows_of(records: list[dict[str, Any]], columns: list[str]) -> dict[int, tuple[Any, ...]]:
    out: dict[int, tuple[Any, ...]] = {}
    for r in records:
        assert r["id"] not in out, f"key {r['id']} read twice"
        out[r["id"]] = tuple(r[c] for c in columns)
    return out


def frame_records(frame: Any) -> list[dict[str, Any]]:
    return pa.Table.from_pandas(frame, preserve_index=False).to_pylist()


def versions_to_check(lake: MoveLake) -> list[int]:
    vs = sorted(lake.models)
    picked = {vs[0], vs[len(vs) // 2], vs[-1], *lake.tags.values()}
    return sorted(picked)


def gt(thr: int) -> Any:
    return lambda r: r["qty"] is not None and r["qty"] > thr


# -- mere itself, DuckDB, Polars, Dask, torch on the same versions ------------------------------------


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), phases=FAST)
@given(histories, st.integers(0, 15))
def test_every_engine_reads_each_version_as_the_model(hist: Any, thr: int) -> None:
    import dask
    import duckdb
    import polars as pl

    from mere.integrations import dask as mere_dask
    from mere.integrations.duckdb import register
    from mere.integrations.polars import scan_table
    from mere.integrations.torch import TableDataset

    lake = MoveLake(*hist)
    t = lake.t
    for v in versions_to_check(lake):
        names, _ = lake.models[v]
        want = lake.rows(v)
        assert rows_of(t.scan(version=v).to_arrow().to_pylist(), names) == want, v
        assert t.scan(version=v).to_arrow().schema.names == names
        label = "label" if "label" in names else "name"
        # DuckDB: everything, a count, a non-key WHERE, a WHERE on the (renamed) string column
        con = duckdb.connect()
        register(con, "m", t, version=v)
        assert rows_of(con.sql("SELECT * FROM m").fetch_arrow_table().to_pylist(), names) == want
        assert con.sql("SELECT count(*) FROM m").fetchall()[0][0] == len(want)
        got = con.sql(f"SELECT id, qty FROM m WHERE qty > {thr}").fetch_arrow_table().to_pylist()
        assert rows_of(got, ["id", "qty"]) == lake.rows(v, gt(thr), ["id", "qty"]), (v, thr)
        got = con.sql(f"SELECT id, p FROM m WHERE {label} = 'x' AND p <> 'b'").fetch_arrow_table().to_pylist()
        assert rows_of(got, ["id", "p"]) == lake.rows(
            v, lambda r, lab=label: r[lab] == "x" and r["p"] != "b", ["id", "p"]
        )
        assert con.sql(f"SELECT count(*) FROM m WHERE qty IS NULL OR qty <= {thr}").fetchall()[0][0] == len(
            want
        ) - len(lake.rows(v, gt(thr)))
        if "extra" in names:
            got = con.sql("SELECT id, extra FROM m WHERE extra = 7").fetch_arrow_table().to_pylist()
            assert rows_of(got, ["id", "extra"]) == lake.rows(v, lambda r: r["extra"] == 7, ["id", "extra"])
            got = con.sql("SELECT id FROM m WHERE extra IS NULL").fetch_arrow_table().to_pylist()
            assert sorted(r["id"] for r in got) == sorted(lake.rows(v, lambda r: r["extra"] is None))
        # Polars: lazy filters and selections, len()
        lazy = scan_table(t, version=v)
        got = lazy.filter(pl.col("qty") > thr).select("id", "qty").collect().to_dicts()
        assert rows_of(got, ["id", "qty"]) == lake.rows(v, gt(thr), ["id", "qty"])
        assert lazy.select(pl.len()).collect().item() == len(want)
        got = lazy.filter(pl.col(label).is_null()).select("id", label).collect(engine="streaming").to_dicts()
        assert rows_of(got, ["id", label]) == lake.rows(v, lambda r, lab=label: r[lab] is None, ["id", label])
        got = lazy.filter((pl.col("p") == "a") & (pl.col("qty") > thr)).select("id").collect().to_dicts()
        assert sorted(r["id"] for r in got) == sorted(lake.rows(v, lambda r: r["p"] == "a" and gt(thr)(r)))
        # Dask: a mere filter and an engine filter, len
        with dask.config.set(scheduler="sync"):
            ddf = mere_dask.read_table(t, version=v, min_partitions=3)
            assert len(ddf) == len(want)
            assert rows_of(frame_records(ddf.compute()), names) == want
            sub = ddf[ddf["qty"] > thr][["id", "qty"]].compute()
            assert rows_of(frame_records(sub), ["id", "qty"]) == lake.rows(v, gt(thr), ["id", "qty"])
            pushed = mere_dask.read_table(t, columns=["id", "qty"], filter=f"qty > {thr}", version=v)
            assert rows_of(frame_records(pushed.compute()), ["id", "qty"]) == lake.rows(
                v, gt(thr), ["id", "qty"]
            )
        # torch: every key once in the tensors; arrow batches with a non-key filter
        ds = TableDataset(t, columns=["id"], version=v, batch_size=3)
        seen = [int(x) for b in ds for x in b["id"]]
        assert sorted(seen) == sorted(want)
        ds = TableDataset(
            t, columns=["id", "qty", label], filter=f"qty > {thr}", version=v, batch_size=2, output="arrow"
        )
        got = [r for b in ds for r in b.to_pylist()]
        assert rows_of(got, ["id", "qty", label]) == lake.rows(v, gt(thr), ["id", "qty", label])
    for name, v in lake.tags.items():
        con = duckdb.connect()
        register(con, "tagged", t, tag=name)
        assert rows_of(
            con.sql("SELECT * FROM tagged").fetch_arrow_table().to_pylist(), lake.models[v][0]
        ) == lake.rows(v)
        assert scan_table(t, tag=name).select(pl.len()).collect().item() == len(lake.rows(v))


# -- merge operators: sum and max under partial upserts and deletes ---------------------------------------

agg_op = st.one_of(
    st.tuples(
        st.just("upsert"),
        st.lists(
            st.tuples(ids, qtys, st.one_of(st.none(), st.integers(-5, 5)), st.sampled_from(NAMES)),
            min_size=1,
            max_size=6,
        ),
    ),
    st.tuples(st.just("partial"), st.lists(st.tuples(ids, qtys), min_size=1, max_size=5)),
    st.tuples(st.just("delete_keys"), st.lists(ids, min_size=1, max_size=3)),
    st.tuples(st.just("compact"), st.none()),
)


def _add(a: Any, b: Any) -> Any:
    return a if b is None else b if a is None else a + b


def _max(a: Any, b: Any) -> Any:
    return a if b is None else b if a is None else max(a, b)


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), phases=FAST)
@given(st.lists(agg_op, min_size=1, max_size=7), st.integers(-2, 10))
def test_merge_operator_tables_read_alike_in_every_engine(ops: list[Any], thr: int) -> None:
    import dask
    import duckdb
    import polars as pl

    from mere.integrations import dask as mere_dask
    from mere.integrations.duckdb import register
    from mere.integrations.polars import scan_table
    from mere.integrations.torch import TableDataset

    cat = mere.connect(tempfile.mkdtemp(prefix="t53a-"))
    t = cat.create_table(
        "t53.agg",
        AGG,
        primary_key="id",
        buckets=2,
        merge_operators={"tot": "sum", "hi": "max"},
        properties=MANUAL,
    )
    model: dict[int, dict[str, Any]] = {}
    for kind, arg in ops:
        if kind == "upsert":
            for i, tot, hi, note in arg:
                old = model.get(i, {"tot": None, "hi": None})
                model[i] = {"id": i, "tot": _add(old["tot"], tot), "hi": _max(old["hi"], hi), "note": note}
            t.upsert(pa.Table.from_pylist([dict(zip(AGG.names, r, strict=True)) for r in arg], schema=AGG))
        elif kind == "partial":
            for i, tot in arg:
                old = model.get(i, {"tot": None, "hi": None, "note": None})
                model[i] = {**old, "id": i, "tot": _add(old["tot"], tot)}
            t.upsert(pa.table({"id": pa.array([i for i, _ in arg], pa.int64()), "tot": [x for _, x in arg]}))
        elif kind == "delete_keys":
            t.delete(pa.table({"id": pa.array(arg, pa.int64())}))
            for i in arg:
                model.pop(i, None)
        else:
            t.compact(min_files=1)
    want = {i: tuple(r[c] for c in AGG.names) for i, r in model.items()}
    big = {i: (r["tot"],) for i, r in model.items() if r["tot"] is not None and r["tot"] > thr}
    assert rows_of(t.to_arrow().to_pylist(), AGG.names) == want
    con = duckdb.connect()
    register(con, "agg", t)
    assert rows_of(con.sql("SELECT * FROM agg").fetch_arrow_table().to_pylist(), AGG.names) == want
    assert (
        rows_of(
            con.sql(f"SELECT id, tot FROM agg WHERE tot > {thr}").fetch_arrow_table().to_pylist(), ["tot"]
        )
        == big
    )
    assert con.sql("SELECT count(*) FROM agg").fetchall()[0][0] == len(want)
    got = scan_table(t).filter(pl.col("tot") > thr).select("id", "tot").collect().to_dicts()
    assert rows_of(got, ["tot"]) == big
    got = scan_table(t, columns=["id", "hi"]).filter(pl.col("hi").is_not_null()).collect().to_dicts()
    assert rows_of(got, ["hi"]) == {i: (r["hi"],) for i, r in model.items() if r["hi"] is not None}
    with dask.config.set(scheduler="sync"):
        ddf = mere_dask.read_table(t, filter=f"tot > {thr}")
        assert len(ddf) == len(big)
        assert rows_of(frame_records(ddf.compute()), ["tot"]) == big
    got = [
        r for b in TableDataset(t, filter=f"tot > {thr}", output="arrow", batch_size=2) for r in b.to_pylist()
    ]
    assert rows_of(got, ["tot"]) == big


# -- Ray ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_mod() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    from rayutil import local_ray

    with local_ray(ray):
        yield ray


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), phases=FAST)
@given(histories, st.integers(0, 15))
def test_ray_reads_each_version_as_the_model(ray_mod: Any, hist: Any, thr: int) -> None:
    from mere.integrations.ray import read_table

    lake = MoveLake(*hist)
    for v in versions_to_check(lake):
        names, _ = lake.models[v]
        label = "label" if "label" in names else "name"
        ds = read_table(lake.t, version=v)
        assert ds.count() == len(lake.rows(v))
        assert rows_of(ds.take_all(), names) == lake.rows(v)
        ds = read_table(lake.t, columns=["id", "qty", label], filter=f"qty > {thr}", version=v)
        got = ds.filter(lambda r, lab=label: r[lab] != "y").take_all()
        assert rows_of(got, ["id", "qty"]) == lake.rows(
            v, lambda r, lab=label: gt(thr)(r) and r[lab] != "y", ["id", "qty"]
        )
        assert ds.select_columns(["id"]).count() == len(lake.rows(v, gt(thr)))


# -- bad arguments --------------------------------------------------------------------------------------


def test_bad_arguments_to_every_entry_point_are_typed_and_change_nothing(ray_mod: Any) -> None:
    import duckdb

    from mere.integrations import dask as mere_dask
    from mere.integrations import ray as mere_ray
    from mere.integrations.duckdb import register
    from mere.integrations.polars import scan_table
    from mere.integrations.torch import TableDataset

    lake = MoveLake([("upsert", [(1, "a", 5, "x", None), (2, "b", 6, None, None)])], [("tag", None)])
    t = lake.t
    before = (t.version, t.to_arrow().to_pylist(), t.tags())
    con = duckdb.connect()
    calls = [
        lambda: register(con, "v", t, columns=["name"]),  # renamed away
        lambda: register(con, "v", t, filter="nosuch > 1"),
        lambda: register(con, "v", t, version=999),
        lambda: register(con, "v", t, tag="nosuch"),
        lambda: register(con, "v", t, version=1, tag="tag0"),
        lambda: register(con, "v", t.scan(), version=1),
        lambda: register(con, "", t),
        lambda: register("con", "v", t),
        lambda: scan_table(t, columns=["name"]),
        lambda: scan_table(t, filter="qty >"),
        lambda: scan_table(t, version=-1),
        lambda: scan_table(t.scan()),
        lambda: mere_dask.read_table(t, columns=["nosuch"]),
        lambda: mere_dask.read_table(t, min_partitions=0),
        lambda: mere_dask.read_table(t, tag="nosuch"),
        lambda: mere_ray.read_table(t, filter="label = 1 and"),
        lambda: mere_ray.read_table(t, max_task_bytes=0),
        lambda: mere_ray.read_table(t, version=999),
        lambda: TableDataset(t, columns=["label"]),  # strings are not tensors
        lambda: TableDataset(t, columns=["id"], batch_size=0),
        lambda: TableDataset(t, columns=["id"], rank=2, world_size=2),
        lambda: TableDataset(t, columns=["id"], tag="nosuch"),
    ]
    for i, call in enumerate(calls):
        with pytest.raises(MereError):
            call()
        assert (t.version, t.tags()) == before[::2], i
    assert t.refresh().to_arrow().to_pylist() == before[1]


# -- filters on the renamed and added columns, given to each adapter; row limits after non-key filters --

EVOLVED_FILTERS = [
    ("label = 'x'", lambda r: r["label"] == "x"),
    ("extra = 7", lambda r: r["extra"] == 7),
    ("extra is null and qty is not null", lambda r: r["extra"] is None and r["qty"] is not None),
    ("p = 'a'", lambda r: r["p"] == "a"),  # a partition filter: moved keys must not stay in 'a'
    ("p in ('a', 'c') and qty > 2", lambda r: r["p"] in ("a", "c") and r["qty"] is not None and r["qty"] > 2),
    (
        "label is null or extra > 3",
        lambda r: r["label"] is None or (r["extra"] is not None and r["extra"] > 3),
    ),
]


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), phases=FAST)
@given(histories, st.integers(0, 5), st.integers(0, 6))
def test_adapter_filters_on_evolved_columns_and_row_limits(hist: Any, which: int, n: int) -> None:
    import dask
    import duckdb
    import polars as pl

    from mere.integrations import dask as mere_dask
    from mere.integrations.duckdb import register
    from mere.integrations.polars import scan_table
    from mere.integrations.torch import TableDataset

    lake = MoveLake(*hist)
    t = lake.t
    text, keep = EVOLVED_FILTERS[which]
    cols = ["id", "label", "extra"]
    want = lake.rows(t.version, keep, cols)
    assert rows_of(t.to_arrow(filter=text, columns=cols).to_pylist(), cols) == want
    con = duckdb.connect()
    register(con, "f", t, columns=cols, filter=text)
    assert rows_of(con.sql("SELECT * FROM f").fetch_arrow_table().to_pylist(), cols) == want
    assert con.sql("SELECT count(*) FROM f").fetchall()[0][0] == len(want)
    assert rows_of(scan_table(t, filter=text, columns=cols).collect().to_dicts(), cols) == want
    with dask.config.set(scheduler="sync"):
        ddf = mere_dask.read_table(t, columns=cols, filter=text, min_partitions=2)
        assert len(ddf) == len(want)
        assert rows_of(frame_records(ddf.compute()), cols) == want
    got = [
        r
        for b in TableDataset(t, columns=cols, filter=text, output="arrow", batch_size=3)
        for r in b.to_pylist()
    ]
    assert rows_of(got, cols) == want
    # the version before the schema change reads its own column name, and only its own
    first = min(lake.models)
    old = lake.rows(first, lambda r: r["name"] == "x", ["id", "name"])
    register(con, "old", t, version=first, filter="name = 'x'", columns=["id", "name"])
    assert rows_of(con.sql("SELECT * FROM old").fetch_arrow_table().to_pylist(), ["id", "name"]) == old
    with pytest.raises(MereError):
        t.scan(version=first, filter="label = 'x'")
    # Polars row limits: a limit after a non-key filter returns merged rows of the filter only
    lazy = scan_table(t)
    everything = lake.rows(t.version, None, ["id", "qty"])
    nonnull = {i: r for i, r in everything.items() if r[1] is not None}
    got = lazy.filter(pl.col("qty").is_not_null()).head(n).select("id", "qty").collect().to_dicts()
    assert len(got) == min(n, len(nonnull))
    assert all(nonnull[r["id"]] == (r["id"], r["qty"]) for r in got)
    got = lazy.head(n).filter(pl.col("qty").is_not_null()).select("id", "qty").collect().to_dicts()
    assert len(got) <= n and all(nonnull[r["id"]] == (r["id"], r["qty"]) for r in got)
    # DuckDB: a LIMIT after a non-key WHERE, on a view of every column
    register(con, "m", t)
    got = con.sql(f"SELECT id, qty FROM m WHERE qty IS NOT NULL LIMIT {n}").fetch_arrow_table().to_pylist()
    assert len(got) == min(n, len(nonnull))
    assert all(nonnull[r["id"]] == (r["id"], r["qty"]) for r in got)
