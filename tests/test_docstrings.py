"""The entry points users call document their arguments, what they return and what they raise.

ruff checks the form of the public modules' docstrings (pydocstyle, Google convention, with D417: an
``Args:`` section names every argument; see pyproject.toml). ruff's pydoclint rules, which would ask for
the sections themselves (DOC201, DOC501), are preview-only, and ruff's preview mode also changes stable
rules across the whole project; so this test asks for the sections, reading the source with ``ast``.
Every entry point below has ``Args:`` naming each of its parameters (when it takes any), ``Returns:``
(``Yields:`` for a generator) when it returns something and not when it returns None, and ``Raises:``
naming exceptions that exist (mere's typed errors, or built-in ones), or a sentence saying it raises
nothing. A class stands for its constructor: its docstring documents the parameters of ``__init__``.
"""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

import pytest

from mere import errors

SRC = Path(__file__).resolve().parents[1] / "src" / "mere"

ENTRY_POINTS: dict[str, list[str]] = {
    "table/catalog.py": ["connect", "Catalog.create_table", "Catalog.table", "Catalog.drop_table"],
    "table/table.py": [
        f"Table.{name}"
        for name in (
            "upsert",
            "append",
            "delete",
            "update",
            "overwrite",
            "merge",
            "scan",
            "to_arrow",
            "changes",
            "compact",
            "plan_compaction",
            "auto_compact",
            "expire",
            "cleanup",
            "transaction",
            "commit",
            "abort",
            "rollback",
            "history",
        )
    ],
    "table/scan.py": [
        f"Scan.{name}"
        for name in (
            "select",
            "where",
            "plan",
            "explain",
            "tasks",
            "to_batches",
            "to_reader",
            "to_arrow",
            "to_pandas",
            "to_polars",
            "count",
        )
    ],
    "table/transaction.py": [
        f"Transaction.{name}"
        for name in (
            "upsert",
            "append",
            "delete",
            "update",
            "overwrite",
            "truncate",
            "set_properties",
            "commit",
            "abort",
        )
    ],
    "table/ops/merge_into.py": [
        "Merge.execute",
        "Merge.explain",
        "Merge.stage",
        *(
            f"MergeBuilder.{name}"
            for name in (
                "when_matched_update",
                "when_matched_update_all",
                "when_matched_delete",
                "when_matched_do_nothing",
                "when_not_matched_insert",
                "when_not_matched_insert_all",
                "when_not_matched_do_nothing",
                "when_not_matched_by_source_update",
                "when_not_matched_by_source_delete",
            )
        ),
    ],
    "table/ops/change_log.py": ["follow"],
    "integrations/dask.py": ["read_table", "write"],
    "integrations/ray.py": ["read_table", "write", "MereDatasource", "MereDatasink"],
    "integrations/polars.py": ["scan_table"],
    "integrations/duckdb.py": ["register", "dataset"],
    "integrations/torch.py": ["TableDataset", "TableDataset.set_epoch"],
    "integrations/spark/native.py": ["read_table"],
    "integrations/spark/merge.py": ["merge", "SparkMerge.execute", "SparkMerge.explain"],
    "integrations/spark/compact.py": ["compact"],
    "integrations/spark/session.py": ["local_session", "register", "check_workers"],
}

SECTION = re.compile(r"^(Args|Returns|Yields|Raises|Example|Examples|Note|Notes):\s*$")
ENTRY = re.compile(r"^ {4}(\*{0,2}\w+(?:\.\w+)*)(?: \([^)]*\))?:")

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _find(tree: ast.Module, qualname: str) -> ast.ClassDef | Function:
    scope: list[ast.stmt] = tree.body
    found: ast.stmt | None = None
    for part in qualname.split("."):
        found = next(
            (
                n
                for n in scope
                if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and n.name == part
            ),
            None,
        )
        assert found is not None, f"{qualname}: no {part!r} there"
        scope = found.body  # type: ignore[attr-defined]
    assert isinstance(found, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
    return found


def _sections(doc: str) -> dict[str, list[str]]:
    """The docstring's sections (a header at the left margin), each as the lines under it."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in doc.splitlines():
        header = SECTION.match(line)
        if header:
            current = out.setdefault(header.group(1), [])
        elif line and not line[0].isspace():
            current = None  # prose after the sections
        elif current is not None:
            current.append(line)
    return out


def _entries(lines: list[str]) -> list[str]:
    return [m.group(1) for m in map(ENTRY.match, lines) if m]


def _parameters(fn: Function) -> list[str]:
    a = fn.args
    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    if a.vararg is not None:
        names.append(a.vararg.arg)
    if a.kwarg is not None:
        names.append(a.kwarg.arg)
    return [n for n in names if n not in ("self", "cls")]


def _is_generator(fn: Function) -> bool:
    """Whether ``fn`` itself yields (a nested function's yield does not count)."""
    todo: list[ast.AST] = list(fn.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Yield | ast.YieldFrom):
            return True
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            todo.extend(ast.iter_child_nodes(node))
    return False


def _returns_none(fn: Function) -> bool:
    r = fn.returns
    return r is None or (isinstance(r, ast.Constant) and r.value in (None, "None"))


def _problems(node: ast.ClassDef | Function) -> list[str]:
    doc = ast.get_docstring(node)
    if not doc:
        return ["no docstring"]
    if isinstance(node, ast.ClassDef):
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        assert init is not None, f"{node.name} has no __init__ to document"
        fn: Function = init
        returns, generator = False, False
    else:
        fn = node
        generator = _is_generator(fn)
        returns = not _returns_none(fn)
    sections = _sections(doc)
    problems = []
    params = _parameters(fn)
    if params:
        documented = {name.lstrip("*") for name in _entries(sections.get("Args", []))}
        missing = [p for p in params if p not in documented]
        if "Args" not in sections:
            problems.append("no Args section")
        elif missing:
            problems.append(f"Args misses {missing}")
    elif "Args" in sections:
        problems.append("an Args section but no arguments")
    wanted = "Yields" if generator else "Returns"
    if returns and wanted not in sections:
        problems.append(f"no {wanted} section")
    if not returns and not generator and "Returns" in sections:
        problems.append("a Returns section but it returns None")
    raised = _entries(sections.get("Raises", []))
    if not raised and "Raises nothing" not in doc:
        problems.append("no Raises section (or no exception named in it)")
    unknown = [
        e
        for e in raised
        if not isinstance(getattr(errors, e, getattr(builtins, e, None)), type)
        or not issubclass(getattr(errors, e, getattr(builtins, e, None)), BaseException)
    ]
    if unknown:
        problems.append(f"Raises names unknown exceptions {unknown}")
    return problems


CASES = [(module, name) for module, names in ENTRY_POINTS.items() for name in names]


@pytest.mark.parametrize(("module", "qualname"), CASES, ids=[f"{m}:{q}" for m, q in CASES])
def test_entry_point_documents_args_returns_and_raises(module: str, qualname: str) -> None:
    tree = ast.parse((SRC / module).read_text(encoding="utf-8"))
    problems = _problems(_find(tree, qualname))
    assert not problems, f"{module}:{qualname}: {'; '.join(problems)}"


def test_the_checker_catches_what_it_should() -> None:
    """The checks themselves: a docstring without sections fails each of them."""
    tree = ast.parse(
        'def f(a, *b, c, **d) -> int:\n    """Summary."""\n'
        'def g(a) -> None:\n    """Summary.\n\n    Args:\n        a: A.\n\n    Returns:\n        Nothing.\n\n'
        '    Raises:\n        NoSuchError: never.\n    """\n'
        'def h(a) -> int:\n    """Summary.\n\n    Args:\n        a: A.\n\n    Returns:\n        One.\n\n'
        '    Raises:\n        InvalidInput: when.\n    """\n'
    )
    f, g, h = (_find(tree, n) for n in "fgh")
    assert _problems(f) == [
        "no Args section",
        "no Returns section",
        "no Raises section (or no exception named in it)",
    ]
    assert _problems(g) == [
        "a Returns section but it returns None",
        "Raises names unknown exceptions ['NoSuchError']",
    ]
    assert _problems(h) == []
