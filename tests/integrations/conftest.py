"""Engine tests share one table builder (enginelake.py) and a table of it per test."""

from __future__ import annotations

from pathlib import Path

import pytest
from enginelake import build

import mere


@pytest.fixture
def lake(tmp_path: Path) -> mere.Table:
    """The engines' table: upserts, CDC deletes, a partial upsert, day partitions (one null), 6 versions."""
    return build(mere.connect(str(tmp_path / "wh")))


def sorted_by_id(table: object) -> object:
    """An Arrow table in key order (engines return rows in their own order)."""
    import pyarrow as pa

    assert isinstance(table, pa.Table)
    return table.sort_by("id") if "id" in table.column_names else table
