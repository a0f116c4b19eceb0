"""The README's usage example runs as written."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def python_blocks(path: Path) -> list[str]:
    """Self-contained examples; Spark examples are exercised by tests/integrations/spark instead."""
    blocks = re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)
    return [b for b in blocks if not any(s in b for s in ("SparkSession", "spark.", "df.write"))]


@pytest.mark.parametrize("index", range(len(python_blocks(ROOT / "README.md"))))
def test_readme_example_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = python_blocks(ROOT / "README.md")[index]
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(code, f"README.md[{index}]", "exec"), namespace)
    assert os.path.exists(tmp_path / "warehouse")


@pytest.mark.parametrize("index", range(len(python_blocks(ROOT / "docs" / "sql.md"))))
def test_sql_doc_example_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = python_blocks(ROOT / "docs" / "sql.md")[index]
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(code, f"docs/sql.md[{index}]", "exec"), namespace)
    assert os.path.exists(tmp_path / "warehouse")


def concepts_examples() -> list[str]:
    """The concept guide's self-contained examples (the others are fragments of a sentence)."""
    return [b for b in python_blocks(ROOT / "docs" / "concepts.md") if "mere.connect(" in b]


@pytest.mark.parametrize("index", range(len(concepts_examples())))
def test_concepts_doc_example_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = concepts_examples()[index]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"docs/concepts.md[{index}]", "exec"), {})
    assert os.path.exists(tmp_path / "warehouse")
