"""Repetitive string columns are read as dictionaries and merged as indices: results are plain strings, always."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import mere
from mere.read import reader
from mere.read.reader import SplitReader
from mere.table.scan import Explain

SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string()), ("b", pa.binary()), ("n", pa.int64())])


def batch(ids: range, s: list[str], n: int) -> pa.Table:
    ss = [s[i % len(s)] for i in range(len(ids))]
    return pa.table(
        {"id": list(ids), "s": ss, "b": [x.encode() for x in ss], "n": [n] * len(ids)}, schema=SCHEMA
    )


def unique(ids: range, tag: str) -> list[str]:
    return [f"{tag}-{i}-{'x' * 40}" for i in ids]


@pytest.fixture(params=["dictionary", "plain"])
def string_reads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of reading dictionary pages: as dictionaries (what splits of big files do) and plain (what
    splits of small files do, as these tables' are by default)."""
    if request.param == "dictionary":
        monkeypatch.setattr(reader, "DICTIONARY_MIN_ROWS", 0)
    return str(request.param)


@pytest.mark.parametrize("operators", [None, {"n": "sum"}])
def test_dictionary_and_plain_files_merge_to_plain_strings(
    local_cat: mere.Catalog, operators: dict[str, str] | None, string_reads: str
) -> None:
    t = local_cat.create_table("d.t", SCHEMA, primary_key=["id"], buckets=2, merge_operators=operators)
    model: dict[int, dict[str, object]] = {}

    def apply(tbl: pa.Table) -> None:
        t.upsert(tbl)
        for r in tbl.to_pylist():
            old = model.get(r["id"])
            if operators and old is not None:
                r = {**r, "n": old["n"] + r["n"]}
            model[r["id"]] = r

    apply(batch(range(0, 3000), ["red", "green", "blue"], 1))  # repetitive: dictionary pages
    apply(batch(range(1000, 4000), unique(range(3000), "u"), 2))  # unique: plain pages
    apply(batch(range(2500, 3500), ["red", "cyan"], 3))
    t.delete("id < 100")
    for k in range(100):
        model.pop(k)
    kinds = set()
    for path in t.files().column("path").to_pylist():
        md = pq.ParquetFile(t.storage.full_path(path)).metadata
        if "s" in md.schema.names:  # delete markers hold keys only
            kinds.add(md.row_group(0).column(md.schema.names.index("s")).has_dictionary_page)
    assert kinds == {True, False}  # both kinds of file take part in the merge

    got = t.to_arrow()
    assert got.schema.field("s").type == pa.string() and got.schema.field("b").type == pa.binary()
    assert sorted(got.to_pylist(), key=lambda r: r["id"]) == sorted(model.values(), key=lambda r: r["id"])
    filters = [
        ("s = 'red'", lambda r: r["s"] == "red"),
        ("s != 'red' and id > 2000", lambda r: r["s"] != "red" and r["id"] > 2000),
    ]
    for flt, keep in filters:
        rows = sorted(t.scan(filter=flt).to_arrow().to_pylist(), key=lambda r: r["id"])
        assert rows == sorted((r for r in model.values() if keep(r)), key=lambda r: r["id"]), flt
    batches = list(t.scan(columns=["s"]).to_batches())
    assert all(b.schema.field("s").type == pa.string() for b in batches)
    t.upsert(pa.table({"id": [2600], "n": [5]}))  # a partial file: the general merge path
    model[2600] = {**model[2600], "n": (model[2600]["n"] + 5) if operators else 5}  # type: ignore[operator]
    assert sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"]) == sorted(
        model.values(), key=lambda r: r["id"]
    )
    assert t.compact() is not None
    assert sorted(t.to_arrow().to_pylist(), key=lambda r: r["id"]) == sorted(
        model.values(), key=lambda r: r["id"]
    )


def test_only_splits_holding_a_big_file_read_strings_as_dictionaries(
    local_cat: mere.Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = local_cat.create_table("d.big", SCHEMA, primary_key=["id"], buckets=1)
    t.upsert(batch(range(0, 3000), ["red", "green", "blue"], 1))
    t.upsert(batch(range(2000, 2500), ["cyan"], 2))

    def dictionary_columns() -> tuple[str, ...]:
        scan = t.scan()
        (split,), opts = scan._plan(Explain(scan.version))
        return SplitReader(t.storage, t.spec, split, opts).opts.dictionary

    assert dictionary_columns() == ()  # 3,000 rows: below the threshold, read plain
    monkeypatch.setattr(reader, "DICTIONARY_MIN_ROWS", 3000)
    assert dictionary_columns() == ("s", "b")
    monkeypatch.setattr(reader, "DICTIONARY_MIN_ROWS", 3001)
    assert dictionary_columns() == ()
