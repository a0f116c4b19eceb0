"""Adversarial: tables whose files differ in nullability (``REQUIRED_WHERE_NO_NULLS``) and in value layout
(``ADAPTIVE_ENCODINGS``) read, filter, count, stream, evolve, compact and feed changes exactly as a twin table
written with both switched off, and every read has the table's schema (its nullability), never a file's."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mere
from mere.io import keyindex
from mere.io import parquet as P


@contextmanager
def _layout(on: bool) -> Iterator[None]:
    saved = P.ADAPTIVE_ENCODINGS, P.REQUIRED_WHERE_NO_NULLS
    P.ADAPTIVE_ENCODINGS = P.REQUIRED_WHERE_NO_NULLS = on
    try:
        yield
    finally:
        P.ADAPTIVE_ENCODINGS, P.REQUIRED_WHERE_NO_NULLS = saved


Step = Callable[[mere.Table], Any]


def _twins(root: Path, schema: pa.Schema, steps: list[Step], **options: Any) -> tuple[mere.Table, mere.Table]:
    """The same steps on a table of the new layout and on a twin of the old one."""
    out = []
    for on in (True, False):
        with _layout(on):
            t = mere.connect(str(root / str(on))).create_table("t", schema, **options)
            for step in steps:
                step(t)
            out.append(t.refresh())
    return out[0], out[1]


def _sorted(table: pa.Table, keys: list[str]) -> pa.Table:
    return table.sort_by([(k, "ascending") for k in keys]) if table.num_rows else table


def _json(frame: Any) -> str:
    """A frame as JSON, bytes as hex: pandas' ``to_json`` copies bytes values raw and decodes its buffer as
    UTF-8, so a non-UTF-8 value reads whatever follows it (the same frame can give different text)."""
    return str(frame.map(lambda v: v.hex() if isinstance(v, bytes) else v).to_json())


def _reads(t: mere.Table, filters: list[str], keys: list[str]) -> dict[str, Any]:
    """Every read route of the table, by name (an exception's type and message where one fails)."""
    out: dict[str, Any] = {}
    names = t.schema.names

    def run(name: str, read: Callable[[], Any]) -> None:
        try:
            out[name] = read()
        except Exception as e:
            out[name] = f"{type(e).__name__}: {e}"

    run("to_arrow", lambda: _sorted(t.to_arrow(), keys))
    run("count", lambda: t.scan().count())
    run(
        "batches",
        lambda: _sorted(pa.Table.from_batches(list(t.scan().to_batches()), schema=t.schema), keys),
    )
    run("pandas", lambda: _json(t.scan().to_pandas().sort_values(keys).reset_index(drop=True)))
    run("polars", lambda: t.scan().to_polars().sort(keys).to_dicts())

    def read(columns: list[str] | None = None, filter: str | None = None) -> pa.Table:
        return _sorted(t.scan(columns=columns, filter=filter).to_arrow(), keys)

    for c in names:
        cols = list(dict.fromkeys([c, *keys]))
        run(f"columns {cols}", functools.partial(read, cols))
    for f in filters:
        run(f"filter {f}", functools.partial(read, None, f))
        run(f"count {f}", t.scan(filter=f).count)
        run(f"narrow {f}", functools.partial(read, [names[-1], *keys], f))
    return out


def _check_same(new: mere.Table, old: mere.Table, filters: list[str], keys: list[str]) -> None:
    assert new.schema == old.schema
    a, b = _reads(new, filters, keys), _reads(old, filters, keys)
    assert a.keys() == b.keys()
    for name in a:
        x, y = a[name], b[name]
        if isinstance(x, pa.Table):
            assert isinstance(y, pa.Table), (name, y)
            assert x.schema == y.schema, (name, x.schema, y.schema)
            for field in x.schema:  # the table's nullability, not a file's
                assert field.nullable == new.schema.field(field.name).nullable, (name, field)
            assert x.equals(y), (name, x.to_pylist()[:5], y.to_pylist()[:5])
        else:
            assert not (isinstance(x, str) and not isinstance(y, str)), (name, x)
            assert x == y, (name, x, y)


UTC = dt.UTC
WIDE = pa.schema(
    [
        ("k", pa.int64()),
        ("p", pa.string()),
        ("u", pa.uint64()),
        ("i", pa.int64()),
        ("i32", pa.int32()),
        ("d", pa.date32()),
        ("ts", pa.timestamp("us", tz="America/Sao_Paulo")),
        ("dec", pa.decimal128(20, 4)),
        ("b", pa.bool_()),
        ("bin", pa.binary()),
        ("ls", pa.large_string()),
        ("f", pa.float32()),
        ("st", pa.struct([("x", pa.int32()), ("y", pa.string())])),
        ("l", pa.list_(pa.int64())),
        ("m", pa.map_(pa.string(), pa.int64())),
        ("a.b c", pa.int16()),
        ("é", pa.int8()),
        ("allnull", pa.int64()),
    ]
)
_values: dict[str, st.SearchStrategy[Any]] = {
    "u": st.sampled_from([0, 1, 2**63 - 1, 2**63, 2**64 - 1]),
    "i": st.one_of(st.sampled_from([-(2**63), 2**63 - 1, 0, -1]), st.integers(-(2**63), 2**63 - 1)),
    "i32": st.integers(-(2**31), 2**31 - 1),
    "d": st.dates(dt.date(1600, 1, 1), dt.date(2400, 1, 1)),
    "ts": st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1), timezones=st.just(UTC)),
    "dec": st.decimals(-(10**15), 10**15, places=4, allow_nan=False, allow_infinity=False),
    "b": st.booleans(),
    "bin": st.binary(max_size=20),
    "ls": st.text(max_size=8),
    "f": st.floats(width=32, allow_nan=False),
    "st": st.fixed_dictionaries({"x": st.none() | st.integers(-5, 5), "y": st.none() | st.text(max_size=3)}),
    "l": st.lists(st.none() | st.integers(-(2**63), 2**63 - 1), max_size=3),
    "m": st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.integers(-9, 9)), max_size=2, unique_by=lambda x: x[0]
    ),
    "a.b c": st.integers(-(2**15), 2**15 - 1),
    "é": st.integers(-128, 127),
    "allnull": st.none(),
}


@st.composite
def _rows(draw: Any, keys: list[int]) -> list[dict[str, Any]]:
    # per batch each column holds NULLs or none, so the files of one table differ in nullability
    nulls = {c: draw(st.booleans()) for c in _values}
    rows = []
    for k in keys:
        row: dict[str, Any] = {"k": k, "p": "p" + str(k % 3)}
        for c, values in _values.items():
            row[c] = None if nulls[c] and draw(st.booleans()) else draw(values)
        rows.append(row)
    return rows


@st.composite
def _steps(draw: Any) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["upsert", "upsert", "upsert", "delete", "compact", "ramp"]))
        if kind == "delete":
            out.append((kind, draw(st.sampled_from(["k < 5", "i > 0", "k IN (7, 8, 40)", "b"]))))
        elif kind == "compact":
            out.append((kind, None))
        elif kind == "ramp":  # many rows of one run: sampled blocks, delta-encoded columns
            start = draw(st.integers(0, 50))
            out.append(
                (
                    kind,
                    [
                        {
                            "k": k,
                            "p": "p0",
                            "i": k * 1000,
                            "i32": -k,
                            "d": dt.date(1969, 12, 1) + dt.timedelta(k),
                        }
                        for k in range(start, start + 5000)
                    ],
                )
            )
        else:
            keys = draw(st.lists(st.integers(0, 60), min_size=1, max_size=15, unique=True))
            out.append((kind, draw(_rows(keys))))
    return out


FILTERS = [
    "k IN (0, 3, 7, 40, 60, 4000)",
    "k = 7",
    "i > 0",
    "u >= 9223372036854775808",
    "d < '1970-01-01'",
    "allnull IS NULL",
    "ls IS NOT NULL AND i32 < 0",
    "f IS NULL",
]


def _upsert(rows: pa.Table, t: mere.Table) -> Any:
    return t.upsert(rows)


def _delete(where: str, t: mere.Table) -> Any:
    return t.delete(where)


def _compact(t: mere.Table) -> Any:
    return t.compact()


def _apply(steps: list[tuple[str, Any]]) -> list[Step]:
    out: list[Step] = []
    for kind, arg in steps:
        if kind in ("upsert", "ramp"):
            out.append(functools.partial(_upsert, pa.Table.from_pylist(arg, schema=WIDE)))
        elif kind == "delete":
            out.append(functools.partial(_delete, arg))
        else:
            out.append(_compact)
    return out


@settings(
    deadline=None, max_examples=15, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(
    steps=_steps(),
    layout=st.sampled_from(
        [
            dict(buckets=1),
            dict(buckets=3),
            dict(buckets=2, partition_by="p"),
            dict(buckets=2, partition_by="p", key_scope="partition"),
        ]
    ),
    codec=st.sampled_from(
        [
            {},
            {"write.compression": "zstd", "write.compression-level": "7"},
            {"write.compression": "none"},
            {"write.compression": "snappy"},
            {"write.compression": "gzip", "write.compression-level": "2"},
        ]
    ),
    auto=st.sampled_from(["off", "inline"]),
)
def test_wide_tables_read_as_their_twin(
    tmp_path_factory: Any, steps: Any, layout: Any, codec: Any, auto: str
) -> None:
    root = tmp_path_factory.mktemp("w")
    props = {"compaction.auto": auto, **codec}
    new, old = _twins(root, WIDE, _apply(steps), primary_key="k", properties=props, **layout)
    _check_same(new, old, FILTERS, ["k"])


EVOLVING = pa.schema(
    [("k", pa.int64()), ("n", pa.int32()), ("x", pa.float32()), ("s", pa.string()), ("g", pa.int64())]
)


@st.composite
def _evolving_rows(draw: Any, schema: pa.Schema) -> pa.Table:
    keys = draw(st.lists(st.integers(0, 40), min_size=1, max_size=12, unique=True))
    nulls = {f.name: draw(st.booleans()) for f in schema if f.name != "k"}
    columns: dict[str, list[Any]] = {"k": keys}
    for f in schema:
        if f.name == "k":
            continue
        if pa.types.is_integer(f.type):
            v: st.SearchStrategy[Any] = st.integers(-(2**31), 2**31 - 1)
        elif pa.types.is_floating(f.type):
            v = st.floats(width=32, allow_nan=False)
        else:
            v = st.text(max_size=4)
        columns[f.name] = [None if nulls[f.name] and draw(st.booleans()) else draw(v) for _ in keys]
    return pa.table(columns, schema=schema)


EVOLUTIONS = [
    ("widen", lambda t: t.widen("n", pa.int64())),
    ("widen float", lambda t: t.widen("x", pa.float64())),
    ("rename", lambda t: t.rename_column("s", "s2") if "s" in t.schema.names else None),
    ("drop", lambda t: t.drop_column("g") if "g" in t.schema.names else None),
    ("add", lambda t: t.add_column("g", pa.int64(), 5) if "g" not in t.schema.names else None),
    ("compact", lambda t: t.compact()),
    ("delete", lambda t: t.delete("k < 3")),
]


@settings(deadline=None, max_examples=20, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), plan=st.lists(st.sampled_from(range(len(EVOLUTIONS))), min_size=1, max_size=5))
def test_evolved_tables_read_as_their_twin(tmp_path_factory: Any, data: Any, plan: list[int]) -> None:
    """Type widening, renames, drops and re-adds over files of both nullabilities and layouts; reads of
    older versions (time travel) too."""
    root = tmp_path_factory.mktemp("e")
    twins = []
    for on in (True, False):
        with _layout(on):
            twins.append(
                mere.connect(str(root / str(on))).create_table(
                    "t", EVOLVING, primary_key="k", buckets=2, properties={"compaction.auto": "off"}
                )
            )
    versions = []
    for i in plan:
        batch = data.draw(_evolving_rows(twins[0].refresh().schema))
        for on, t in zip((True, False), twins):
            with _layout(on):
                t.upsert(batch)
                EVOLUTIONS[i][1](t)
        versions.append(twins[0].refresh().version)
    new, old = (t.refresh() for t in twins)
    filters = ["k IN (1, 4, 9, 30)", "n > 0", "x IS NULL"]
    _check_same(new, old, filters, ["k"])
    for v in versions:
        a, b = new.to_arrow(version=v), old.to_arrow(version=v)
        assert a.schema == b.schema
        assert _sorted(a, ["k"]).equals(_sorted(b, ["k"]))
        assert all(f.nullable for f in a.schema if f.name != "k")


PAGED = pa.schema(
    [
        ("k", pa.int64()),
        ("n", pa.int64()),
        ("d", pa.date32()),
        ("x", pa.float64()),
        ("s", pa.string()),
        ("c", pa.string()),
        ("l", pa.list_(pa.int32())),
        ("st", pa.struct([("a", pa.int64()), ("b", pa.string())])),
    ]
)


def _paged_rows(keys: np.ndarray, nulls: bool, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    n = len(keys)
    table = pa.table(
        {
            "k": keys,
            "n": keys * 3 + seed,  # a ramp: delta-encoded
            "d": pa.array((keys - 30_000).astype(np.int32)).view(pa.date32()),
            "x": rng.random(n),  # incompressible: uncompressed
            "s": pa.array(np.char.add("s", rng.integers(0, 10**9, n).astype(str)).tolist()),
            "c": pa.array(["abc"[i % 3] for i in range(n)]),
            "l": pa.array([[int(k)] * (int(k) % 3) for k in keys], pa.list_(pa.int32())),
            "st": pa.array([{"a": int(k), "b": str(seed)} for k in keys]),
        },
        schema=PAGED,
    )
    if nulls:
        for c in ("n", "d", "x", "s", "c", "l", "st"):
            i = table.schema.get_field_index(c)
            mask = pa.array(rng.random(n) < 0.1)
            table = table.set_column(i, c, pa.compute.if_else(mask, pa.nulls(n, table[c].type), table[c]))
    return table


@settings(deadline=None, max_examples=6, suppress_health_check=[HealthCheck.too_slow])
@given(
    order=st.permutations([False, True, False]),
    lookups=st.lists(st.integers(0, 70_000), min_size=1, max_size=20, unique=True),
    codec=st.sampled_from(["lz4", "zstd", "none"]),
)
def test_point_reads_from_pages_of_files_of_both_nullabilities(
    tmp_path_factory: Any, order: list[bool], lookups: list[int], codec: str
) -> None:
    """Key lookups read the pages holding the keys (``keyindex.read_rows``: a synthetic file of the
    file's pages) from files of required and of optional columns, delta-encoded and uncompressed."""
    root = tmp_path_factory.mktemp("p")
    t = mere.connect(str(root)).create_table(
        "t",
        PAGED,
        primary_key="k",
        buckets=1,
        properties={"compaction.auto": "off", "write.compression": codec},
    )
    # Lookups whose pages hold most of a row group read it whole (keyindex.WHOLE_SHARE): one key alone
    # near the end of the newest file always goes to its pages.
    lookups = sorted({*lookups, 59_999})
    model: dict[int, dict[str, Any]] = {}
    for seed, nulls in enumerate(order):
        keys = np.arange(seed * 10_000, seed * 10_000 + 40_000, dtype=np.int64)
        rows = _paged_rows(keys, nulls, seed)
        t.upsert(rows)
        model.update({r["k"]: r for r in rows.to_pylist()})
    paged: list[int] = []
    read_rows = keyindex.read_rows

    def spy(*args: Any) -> Any:
        out = read_rows(*args)
        paged.append(len(out))
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(keyindex, "read_rows", spy)
        for columns in (None, ["s", "l"], ["st", "n", "k"]):
            got = t.scan(filter=f"k IN ({', '.join(map(str, lookups))})", columns=columns).to_arrow()
            names = got.schema.names
            assert got.schema == pa.schema([t.schema.field(c) for c in names])
            want = [{c: model[k][c] for c in names} for k in sorted(lookups) if k in model]
            key = "k" if "k" in names else None
            rows = got.sort_by("k").to_pylist() if key else got.to_pylist()
            if key:
                assert rows == want
            else:
                assert sorted(map(repr, rows)) == sorted(map(repr, want))
    assert any(paged), "no lookup read pages"


SEQ = pa.schema(
    [
        ("k", pa.int64()),
        ("seq", pa.int64()),
        ("v", pa.int64()),
        ("w", pa.string()),
        ("gs", pa.int64()),
        ("g1", pa.float64()),
    ]
)
_SEQ_BATCHES = [
    [{"k": i, "seq": 10, "v": i, "w": "a", "gs": 1, "g1": 1.0} for i in range(10)],
    [{"k": i, "seq": 5, "v": None, "w": None, "gs": None, "g1": None} for i in range(5)],
    [{"k": i, "seq": 20, "v": -i, "w": "b", "gs": None, "g1": None} for i in range(0, 10, 3)],
    [{"k": i, "seq": 30, "v": None, "w": None, "gs": 9, "g1": 2.0} for i in range(0, 10, 2)],
]


@pytest.mark.parametrize(
    "options",
    [
        dict(sequence_by="seq"),
        dict(merge_operators="first_row"),
        dict(merge_operators={"v": "last_non_null", "w": "last_non_null"}),
        dict(merge_operators={"v": "sum", "g1": "max"}),
        dict(sequence_by="seq", sequence_groups={"gs": ["g1"]}),
        dict(properties={"changes.log": "on"}),
    ],
    ids=["sequence_by", "first_row", "last_non_null", "sum_max", "sequence_groups", "changes_log"],
)
def test_merge_engines_and_change_feeds_read_as_their_twin(tmp_path: Path, options: dict[str, Any]) -> None:
    """Partial rows (all-NULL columns: required nowhere, optional elsewhere) folded by each merge engine."""
    options = {**options, "properties": {"compaction.auto": "off", **options.get("properties", {})}}
    steps: list[Step] = [
        functools.partial(_upsert, pa.Table.from_pylist(b, schema=SEQ)) for b in _SEQ_BATCHES
    ]
    new, old = _twins(tmp_path, SEQ, steps, primary_key="k", **options)
    _check_same(new, old, ["k IN (0, 3, 4)", "v IS NULL", "g1 > 1"], ["k"])
    feed = [t.changes(0).read_all().drop_columns(["_commit_time"]) for t in (new, old)]
    assert feed[0].schema == feed[1].schema
    assert sorted(map(repr, feed[0].to_pylist())) == sorted(map(repr, feed[1].to_pylist()))
    for t in (new, old):
        with _layout(t is new):
            t.compact()
    _check_same(new.refresh(), old.refresh(), ["k IN (0, 3, 4)", "v IS NULL"], ["k"])
