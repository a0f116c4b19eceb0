"""docs/engines.md runs as written: its examples, in order, as one script."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_engine_examples_run_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (ROOT / "docs" / "engines.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 7
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    for index, code in enumerate(blocks):
        exec(compile(code, f"docs/engines.md[{index}]", "exec"), namespace)
    orders = namespace["orders"]
    # Every engine's write landed: pandas, Polars, DuckDB and the doubled quantities from Dask.
    rows = {
        r["order_id"]: r for r in orders.scan(filter="order_id IN (1, 3, 5, 6, 7)").to_arrow().to_pylist()
    }  # type: ignore[attr-defined]
    assert sorted(rows) == [1, 5, 6, 7]
    assert (rows[1]["qty"], rows[5]["qty"], rows[6]["qty"], rows[7]["qty"]) == (
        200,
        110,
        133,
        154,
    )  # Dask doubled every qty; Ray added 1 on 2026-11-21 (order 6)
    assert rows[5]["note"] == "from pandas"
