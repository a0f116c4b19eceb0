"""A MERGE as plain data (:class:`mere.table.merge.MergeSpec`): what a distributed MERGE ships to its tasks.

A spec survives pickling, builds the same Merge again (the same clauses, the same outcome), and refuses
clauses no MERGE has. The WHEN clause methods are one set shared by Merge and the Spark builder, and take
and refuse arguments as Merge always did.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import mere
from mere.errors import FilterError, InvalidInput
from mere.table.merge import Merge, MergeBuilder, MergeClause, MergeSpec

SCHEMA = pa.schema([("id", pa.int64()), ("qty", pa.int64()), ("note", pa.string())])
SOURCE = pa.table({"id": [1, 2, 5, 6], "qty": [10, 0, 50, 60], "note": ["a", "d", "e", None]})


def _table(tmp: Path, name: str = "m.t") -> mere.Table:
    t = mere.connect(tmp / "wh").create_table(name, SCHEMA, primary_key="id")
    t.upsert(pa.table({"id": [1, 2, 3, 4], "qty": [1, 2, 3, 4], "note": ["x", "y", "z", "w"]}))
    return t


# Each WHEN method with arguments that are valid in any order (no unconditional clause shadows another).
CLAUSES: list[tuple[str, dict[str, Any]]] = [
    ("when_matched_delete", {"condition": "s.qty = 0"}),
    ("when_matched_do_nothing", {"condition": "s.note = 'skip'"}),
    ("when_matched_update", {"set": {"qty": "t.qty + s.qty"}, "condition": "s.qty > 5"}),
    ("when_matched_update_all", {"condition": "s.note = 'a'"}),
    ("when_not_matched_do_nothing", {"condition": "s.qty > 55"}),
    ("when_not_matched_insert", {"values": {"id": "s.id", "qty": "s.qty * 2"}, "condition": "s.id > 5"}),
    ("when_not_matched_insert_all", {"condition": "s.note IS NOT NULL"}),
    ("when_not_matched_by_source_update", {"set": {"note": "'gone'"}, "condition": "t.qty > 3"}),
    ("when_not_matched_by_source_delete", {}),
]


def _rows(t: mere.Table) -> list[dict[str, Any]]:
    return sorted(t.refresh().to_arrow().to_pylist(), key=lambda r: r["id"])


@given(picks=st.lists(st.sampled_from(range(len(CLAUSES))), min_size=1, max_size=5, unique=True))
@example(picks=[0, 2, 3, 5, 6])
@example(picks=[1, 4, 7, 8])
def test_a_spec_builds_the_same_merge_with_the_same_outcome(
    picks: list[int], tmp_path_factory: pytest.TempPathFactory
) -> None:
    tmp = tmp_path_factory.mktemp("spec")
    one, two = _table(tmp, "m.one"), _table(tmp, "m.two")
    merge = one.merge(SOURCE)
    for i in picks:
        name, kwargs = CLAUSES[i]
        merge = getattr(merge, name)(**kwargs)
    spec = merge.to_spec()
    shipped = pickle.loads(pickle.dumps(spec))
    assert shipped == spec and all(isinstance(c, MergeClause) for c in shipped.clauses)
    rebuilt = shipped.build(two, SOURCE)
    assert rebuilt.to_spec() == spec
    assert [c.describe() for c in rebuilt.clauses] == [c.describe() for c in merge.clauses]
    first, second = merge.execute(), rebuilt.execute()
    assert (first.inserted, first.updated, first.deleted) == (second.inserted, second.updated, second.deleted)
    assert _rows(one) == _rows(two)


def test_merge_and_its_spec_name_the_same_statement(tmp_path: Path) -> None:
    t = _table(tmp_path)
    m = t.merge(SOURCE, on="t.id = s.id", source_alias="s", target_alias="t").when_matched_update_all()
    spec = m.to_spec()
    assert spec == MergeSpec(
        "t.id = s.id", "s", "t", (MergeClause("matched", "update", all_columns=True),), ()
    )
    assert spec.adding(MergeClause("not_matched", "insert", None, (("id", "s.id"),))).clauses[
        -1
    ].assignments == (("id", "s.id"),)


@pytest.mark.parametrize(
    ("kind", "action", "assignments", "all_columns"),
    [
        ("matched", "insert", (("id", "s.id"),), False),
        ("not_matched", "delete", (), False),
        ("not_matched_by_source", "nothing", (), False),
        ("not_matched_by_source", "update", (), True),
        ("matched", "update", (), False),
        ("matched", "delete", (("qty", "1"),), False),
        ("sometimes", "update", (("qty", "1"),), False),
    ],
)
def test_a_clause_no_merge_has_is_refused(
    kind: Any, action: Any, assignments: Any, all_columns: bool
) -> None:
    with pytest.raises(InvalidInput):
        MergeClause(kind, action, None, assignments, all_columns)


def test_clause_arguments_are_checked_as_before(tmp_path: Path) -> None:
    m = _table(tmp_path).merge(SOURCE)
    with pytest.raises(InvalidInput, match="UPDATE SET takes a non-empty dict"):
        m.when_matched_update(set="qty = 1")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="INSERT: the value for 'qty' must be SQL text"):
        m.when_not_matched_insert(values={"qty": 1})  # type: ignore[dict-item]
    with pytest.raises(InvalidInput, match="clause condition must be SQL text"):
        m.when_matched_delete(condition=5)  # type: ignore[arg-type]
    with pytest.raises(FilterError):
        m.when_matched_delete(condition="s.qty >")
    with pytest.raises(InvalidInput, match="when_matched_update_all"):
        _table(tmp_path, "m.u").merge(
            SOURCE.append_column("extra", pa.array([1, 2, 3, 4]))
        ).when_matched_update_all().execute()  # refused by execute(), after a replay would have returned
    assert m.clauses == []  # nothing refused was added


def test_one_set_of_clause_methods() -> None:
    names = [n for n in vars(MergeBuilder) if n.startswith("when_")]
    assert len(names) == 9 and all(getattr(Merge, n) is getattr(MergeBuilder, n) for n in names)
