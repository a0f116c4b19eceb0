"""The suite's own layout: every test module has a name of its own.

Test directories are not packages, so pytest imports each module by its file name: a second module of the
same name is not collected ("import file mismatch"), and worker processes spawned by the first unpickle
their functions from whichever one was imported.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path


def test_test_modules_have_names_of_their_own() -> None:
    names = Counter(p.name for p in Path(__file__).parent.rglob("test_*.py"))
    assert [n for n, count in names.items() if count > 1] == []
