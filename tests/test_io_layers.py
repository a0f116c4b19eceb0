"""The io, read and write layers, read from the source (``ast``): ``mere.io`` imports nothing above it and
its storage module no format module, ``mere.read`` and ``mere.write`` do not import each other, no import
circle passes through them (lazy and ``TYPE_CHECKING`` imports count), and no private name crosses a
module boundary in or out of them (imported, or declared by a protocol that other modules call)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
LAYERED = ("mere.io", "mere.read", "mere.write")
# What io may not import: every layer that builds on storage (and the package root, which imports them).
ABOVE_IO = (
    "mere.read",
    "mere.write",
    "mere.table",
    "mere.integrations",
    "mere.expr",
    "mere.lang",
    "mere.catalog",
    "mere.cli",
    "mere.statements",
    "mere.demo",
)


def _module(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if package else parts), package


def _inside(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


@functools.cache
def _sources() -> dict[str, tuple[Path, bool]]:
    return {_module(p)[0]: (p, _module(p)[1]) for p in sorted(SRC.rglob("*.py"))}


@functools.cache
def _imports(module: str) -> list[tuple[str, str | None, str, int]]:
    """(module, name, the name bound, line) for every import of a source module, wherever it stands
    (name None for ``import x``)."""
    path, package = _sources()[module]
    found: list[tuple[str, str | None, str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, None, a.asname or a.name.split(".")[0], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                base = module.split(".")[: None if package else -1]
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            found += [(target, a.name, a.asname or a.name, node.lineno) for a in node.names]
    return found


def _edges(module: str) -> set[str]:
    """The source modules ``module`` imports (``from pkg import mod`` names the module ``pkg.mod``)."""
    sources = _sources()
    out = set()
    for target, name, _, _ in _imports(module):
        full = f"{target}.{name}" if name else target
        if full in sources:
            out.add(full)
        elif target in sources:
            out.add(target)
    out.discard(module)
    return out


def _layered() -> list[str]:
    return [m for m in _sources() if _inside(m, LAYERED)]


def _chain(start: str, unwanted: tuple[str, ...]) -> list[str] | None:
    """The shortest chain of imports from ``start`` to a module of ``unwanted``, or None."""
    came_from: dict[str, str | None] = {start: None}
    todo = [start]
    while todo:
        module = todo.pop(0)
        if _inside(module, unwanted) or module == "mere":
            chain = [module]
            while (before := came_from[chain[-1]]) is not None:
                chain.append(before)
            return chain[::-1]
        for target in sorted(_edges(module)):
            if target not in came_from:
                came_from[target] = module
                todo.append(target)
    return None


def test_io_imports_nothing_above_it() -> None:
    """Not directly, nor through any module it imports (the package root imports every layer)."""
    chains = [_chain(m, ABOVE_IO) for m in _layered() if _inside(m, ("mere.io",))]
    problems = [" -> ".join(c) for c in chains if c]
    assert not problems, problems


def test_storage_moves_bytes_only() -> None:
    """Storage knows transports (options, retries, S3) and the footers it caches; what goes into a file
    (mere.io.parquet, mere.io.keyindex) builds on it, never the other way round."""
    inside_io = {t for t in _edges("mere.io.storage") if _inside(t, ("mere.io",))}
    assert inside_io <= {"mere.io.options", "mere.io.retry", "mere.io.s3", "mere.io.footer"}, inside_io


def test_read_and_write_do_not_import_each_other() -> None:
    """Not directly, nor through any module they import (e.g. read -> expr -> lang -> write.cast)."""
    problems = []
    for module in _layered():
        for mine, other in (("mere.read", "mere.write"), ("mere.write", "mere.read")):
            if _inside(module, (mine,)):
                chain = _chain(module, (other,))
                if chain:
                    problems.append(" -> ".join(chain))
    assert not problems, problems


def _graph() -> dict[str, list[str]]:
    return {m: sorted(_edges(m)) for m in _sources()}


def _circles(graph: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = stack[stack.index(node) :]
            del stack[stack.index(node) :]
            if len(component) > 1:
                out.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return out


def test_no_import_circle_passes_through_io_read_or_write() -> None:
    circles = [c for c in _circles(_graph()) if any(_inside(m, LAYERED) for m in c)]
    assert not circles, circles


def test_the_circle_finder_finds_circles() -> None:
    graph = {"a": ["b"], "b": ["c", "d"], "c": ["a"], "d": ["e"], "e": ["d"], "f": ["a"]}
    assert sorted(_circles(graph)) == [["a", "b", "c"], ["d", "e"]]
    assert _circles({"a": ["b"], "b": ["c"], "c": []}) == []


def test_no_private_name_crosses_into_or_out_of_io_read_or_write() -> None:
    """No module of src imports a private name of another module when either is in io, read or write,
    neither ``from m import _x`` nor ``m._x`` through a module it imported."""
    sources = _sources()
    problems = []
    for module in sources:
        aliases: dict[str, str] = {}  # names bound to a module in this one -> that module
        for target, name, bound, line in _imports(module):
            full = f"{target}.{name}" if name else target
            if full in sources and (name or bound == target):
                aliases[bound] = full
            private = name is not None and name.startswith("_") and not name.startswith("__")
            if private and target != module and (_inside(target, LAYERED) or _inside(module, LAYERED)):
                problems.append(f"{module}:{line}: from {target} import {name}")
        if not aliases:
            continue
        path = sources[module][0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
                continue
            target = aliases.get(node.value.id)
            if (
                target is not None
                and target != module
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and (_inside(target, LAYERED) or _inside(module, LAYERED))
            ):
                problems.append(f"{module}:{node.lineno}: {target}.{node.attr}")
    assert not problems, problems


def test_protocols_of_io_read_and_write_name_no_private_member() -> None:
    """A protocol is what another module calls: a private member there is a private name used across
    modules (as the lookup once called ``_load`` of the reader's file cursors)."""
    problems = []
    for module in _layered():
        path = _sources()[module][0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and any(
                (isinstance(b, ast.Name) and b.id == "Protocol")
                or (isinstance(b, ast.Attribute) and b.attr == "Protocol")
                for b in node.bases
            ):
                problems += [
                    f"{module}.{node.name}.{member.name}"
                    for member in node.body
                    if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and member.name.startswith("_")
                    and not member.name.startswith("__")
                ]
    assert not problems, problems
