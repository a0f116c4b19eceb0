"""The expression package's layering, read from the source (``ast``): ``mere.lang`` builds on
``mere.expr.nodes`` and ``mere.expr.literals`` only, no import circles among ``expr`` and ``lang`` (lazy
imports count), and nobody imports their private names."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
LAYERED = ("mere.expr", "mere.lang")


def _module(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if package else parts), package


def _inside(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _imports(path: Path, module: str | None, package: bool) -> list[tuple[str, str | None, str]]:
    """(module, name, the name bound) for every import in ``path``, wherever it stands (name None for
    ``import x``)."""
    found: list[tuple[str, str | None, str]] = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            found += [(a.name, None, a.asname or a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level and module is not None:
                base = module.split(".")[: None if package else -1]
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            found += [(target, a.name, a.asname or a.name) for a in node.names]
    return found


def _sources() -> dict[str, tuple[Path, bool]]:
    return {_module(p)[0]: (p, _module(p)[1]) for p in SRC.rglob("*.py")}


def _graph() -> dict[str, set[str]]:
    sources = _sources()
    graph: dict[str, set[str]] = {}
    for module, (path, package) in sources.items():
        if not _inside(module, LAYERED):
            continue
        edges = graph.setdefault(module, set())
        for target, name, _ in _imports(path, module, package):
            full = f"{target}.{name}" if name else target
            edges.add(full if full in sources else target)
    return graph


def test_lang_builds_on_expr_nodes_and_literals_only() -> None:
    for module, edges in _graph().items():
        if _inside(module, ("mere.lang",)):
            used = {e for e in edges if _inside(e, ("mere.expr",))}
            assert used <= {"mere.expr.nodes", "mere.expr.literals"}, (module, used)


def test_no_import_circle_among_expr_and_lang() -> None:
    graph = _graph()
    inner = {m: {e for e in edges if e in graph and e != m} for m, edges in graph.items()}
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError("import circle: " + " -> ".join([*path[path.index(module) :], module]))
        if module in done:
            return
        for target in sorted(inner[module]):
            visit(target, [*path, module])
        done.add(module)

    for module in sorted(inner):
        visit(module, [])


def test_no_private_names_of_expr_or_lang_are_imported() -> None:
    """Neither from another module of theirs nor from src, tests, bench or tools (``E._x`` included); and
    expr and lang import no private name of any other module."""
    layered = {m for m in _sources() if _inside(m, LAYERED)}
    problems = []
    for folder in ("src", "tests", "bench", "tools"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            module, package = _module(path) if folder == "src" else (None, False)
            if not _inside(module or "", LAYERED) and not re.search(
                r"\bmere\.(expr|lang)\b|import (expr|lang)\b", path.read_text()
            ):
                continue  # imports nothing of expr or lang (a text search spares parsing most files)
            where = path.relative_to(ROOT)
            aliases = set()  # names bound to a module of expr or lang
            for target, name, bound in _imports(path, module, package):
                if (f"{target}.{name}" if name else target) in layered and (name or bound == target):
                    aliases.add(bound)
                private = name is not None and name.startswith("_") and not name.startswith("__")
                if (
                    private
                    and target != module
                    and (_inside(target, LAYERED) or _inside(module or "", LAYERED))
                ):
                    problems.append(f"{where}: from {target} import {name}")
            problems += [
                f"{where}:{node.lineno}: {node.value.id}.{node.attr}"
                for node in ast.walk(_tree(path))
                if isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ]
    assert not problems, problems
