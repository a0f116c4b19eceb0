"""The layering of ``src/mere``, checked on the source (an ``ast`` walk: no import runs).

Every import counts, wherever it stands: at module level, inside a function (a deferred import is still a
dependency) and under ``TYPE_CHECKING``.

- No module imports a private name (``_x``) of another module, neither by ``from m import _x`` nor as
  ``m._x`` of an imported module; nor uses a private attribute of another module's objects (``obj._x``
  where the module defines no ``_x`` itself: ``Table._sql`` called by an operation, say). Known
  exceptions, all outside ``mere.table``, are listed with the work that removes them.
- ``mere.table`` has no import circle.
- The operations (``mere.table.ops``) depend on the context, commit and conflict modules, never on the
  ``Table`` facade (``mere.table.table``) nor on ``mere.table.transaction``.
- ``mere.io`` imports nothing above it (only the foundation modules below).
- ``mere.read`` and ``mere.write`` do not import each other (known exceptions listed).
- Integrations import only the public core: no private name of it, and none of the table layer's
  internals (operations, commit path, conflict rules, context).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# (importing module, imported module, name): private names imported across modules, outside mere.table.
PRIVATE_IMPORT_EXCEPTIONS: set[tuple[str, str, str]] = set()
# (module, attribute): private attributes of other modules' objects, outside mere.table.
PRIVATE_ATTRIBUTE_EXCEPTIONS = {
    ("mere.io.storage", "_strip_protocol"),  # fsspec's own (a third-party object held in a variable)
    # PySpark's own: a DataFrame's JVM plan has no public accessor in classic PySpark (explain() reads it).
    ("mere.integrations.spark.explain", "_jdf"),
    ("mere.integrations.spark.explain", "_sc"),
    ("mere.integrations.spark.explain", "_jvm"),
}
# (importing module, imported module): write -> read imports, until shared kernels get a neutral home.
READ_WRITE_EXCEPTIONS: set[tuple[str, str]] = set()
FOUNDATION = (
    "mere.errors",
    "mere.arrays",
    "mere.concurrency",
    "mere.retry",
    "mere.optional",
    "mere.durations",
    "mere.options",
)
TABLE_INTERNALS = (
    "mere.table.ops",
    "mere.table.commit",
    "mere.table.conflicts",
    "mere.table.context",
    "mere.table.versions",
    "mere.table.images",
    "mere.table.write_checks",
    "mere.table.transaction",
    "mere.table.inspect",
)


@dataclass(frozen=True)
class Import:
    """One import of a mere module by another: ``names`` for ``from m import a, b`` (empty otherwise)."""

    source: str
    target: str
    names: tuple[str, ...]
    line: int


def module_name(path: Path, src: Path = SRC) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(src: Path = SRC) -> dict[str, Path]:
    return {module_name(p, src): p for p in sorted((src / "mere").rglob("*.py"))}


def imports(name: str, path: Path, known: dict[str, Path]) -> Iterator[Import]:
    """Every import of a mere module in a file, wherever it stands; ``from pkg import submodule`` counts
    as an import of the submodule, and ``alias._x`` of an imported module as importing ``_x``."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("mere"):
                    aliases[alias.asname or alias.name.split(".")[0]] = alias.name
                    yield Import(name, alias.name, (), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base]).strip(".")
            if not base.startswith("mere"):
                continue
            plain = []
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in known:
                    aliases[alias.asname or alias.name] = sub
                    yield Import(name, sub, (), node.lineno)
                else:
                    plain.append(alias.name)
            if plain or not node.names:
                yield Import(name, base, tuple(plain), node.lineno)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and _private(node.attr)
        ):
            yield Import(name, aliases[node.value.id], (node.attr,), node.lineno)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def all_imports(src: Path = SRC) -> list[Import]:
    known = modules(src)
    return [i for name, path in known.items() for i in imports(name, path, known)]


def private_imports(found: list[Import]) -> list[str]:
    return [
        f"{i.source}:{i.line} imports {n} from {i.target}"
        for i in found
        for n in i.names
        if _private(n) and i.target != i.source and (i.source, i.target, n) not in PRIVATE_IMPORT_EXCEPTIONS
    ]


def foreign_private_attributes(src: Path = SRC) -> list[str]:
    """``obj._x`` where ``obj`` is not ``self``/``cls`` nor a module (imported modules are
    :func:`imports`' business) and the module defines no ``_x`` (a function, class, assignment or
    attribute it sets): a private of another module's objects."""
    out = []
    for name, path in modules(src).items():
        tree = ast.parse(path.read_text(), str(path))
        defined: set[str] = set()
        imported: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                defined.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                imported.update((a.asname or a.name).split(".")[0] for a in node.names)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)) or node.attr in defined:
                continue
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and (root.id in ("self", "cls") or root.id in imported):
                continue
            if (name, node.attr) not in PRIVATE_ATTRIBUTE_EXCEPTIONS:
                out.append(f"{name}:{node.lineno} uses {ast.unparse(node)}")
    return out


def cycles(found: list[Import], within: str) -> list[list[str]]:
    """The import circles among the modules under ``within`` (each once, as found by a depth-first walk)."""
    graph: dict[str, set[str]] = {}
    for i in found:
        if _within(i.source, within) and _within(i.target, within) and i.source != i.target:
            graph.setdefault(i.source, set()).add(i.target)
    out: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                out.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return out


def ops_reaching_the_facade(found: list[Import]) -> list[str]:
    banned = ("mere.table.table", "mere.table.transaction")
    return [
        f"{i.source}:{i.line} imports {i.target}"
        for i in found
        if _within(i.source, "mere.table.ops") and any(_within(i.target, b) for b in banned)
    ]


def io_reaching_up(found: list[Import]) -> list[str]:
    return [
        f"{i.source}:{i.line} imports {i.target}"
        for i in found
        if _within(i.source, "mere.io")
        and not _within(i.target, "mere.io")
        and not any(_within(i.target, f) for f in FOUNDATION)
    ]


def read_write_crossings(found: list[Import]) -> list[str]:
    return [
        f"{i.source}:{i.line} imports {i.target}"
        for i in found
        if (
            (_within(i.source, "mere.read") and _within(i.target, "mere.write"))
            or (_within(i.source, "mere.write") and _within(i.target, "mere.read"))
        )
        and (i.source, i.target) not in READ_WRITE_EXCEPTIONS
    ]


def integrations_reaching_in(found: list[Import]) -> list[str]:
    out = []
    for i in found:
        if not _within(i.source, "mere.integrations") or _within(i.target, "mere.integrations"):
            continue
        if any(_within(i.target, t) for t in TABLE_INTERNALS):
            out.append(f"{i.source}:{i.line} imports the table layer's internal {i.target}")
        out += [f"{i.source}:{i.line} imports private {n} from {i.target}" for n in i.names if _private(n)]
    return out


@pytest.fixture(scope="module")
def found() -> list[Import]:
    return all_imports()


def test_the_walk_sees_the_whole_tree(found: list[Import]) -> None:
    names = modules()
    assert {"mere.table.table", "mere.table.commit", "mere.table.ops.write", "mere.io.storage"} <= set(names)
    assert any(i.source == "mere.table.table" and i.target == "mere.table.ops.write" for i in found)


def test_no_module_imports_a_private_name_of_another(found: list[Import]) -> None:
    assert private_imports(found) == []


def test_no_module_uses_private_attributes_of_another() -> None:
    assert foreign_private_attributes() == []


def test_the_table_layer_has_no_import_circle(found: list[Import]) -> None:
    assert cycles(found, "mere.table") == []


def test_operations_depend_on_neither_the_facade_nor_the_transaction(found: list[Import]) -> None:
    assert ops_reaching_the_facade(found) == []


def test_io_imports_nothing_above_it(found: list[Import]) -> None:
    assert io_reaching_up(found) == []


def test_read_and_write_do_not_import_each_other(found: list[Import]) -> None:
    assert read_write_crossings(found) == []


def test_integrations_import_only_the_public_core(found: list[Import]) -> None:
    assert integrations_reaching_in(found) == []


def test_the_checks_catch_what_they_forbid(tmp_path: Path) -> None:
    """Each rule fails on a tree that breaks it (so that a passing run means something)."""
    pkg = tmp_path / "mere"
    for rel, text in {
        "__init__.py": "",
        "io/__init__.py": "",
        "io/storage.py": "from mere.table.table import Table\n",
        "read/__init__.py": "",
        "read/reader.py": "from mere.write import writer\n",
        "write/__init__.py": "",
        "write/writer.py": "",
        "table/__init__.py": "",
        "table/table.py": "from mere.table.ops import write\n",
        "table/ops/__init__.py": "",
        "table/ops/write.py": (
            "def f(t):\n    from mere.table.table import Table\n    from mere.io.storage import _x\n"
            "    return t._sql\n"
        ),
        "integrations/__init__.py": "",
        "integrations/x.py": "from mere.table import commit\nimport mere.table.table as t\nt._hidden\n",
        "table/commit.py": "",
    }.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    bad = all_imports(tmp_path)
    assert private_imports(bad) == [
        "mere.integrations.x:3 imports _hidden from mere.table.table",
        "mere.table.ops.write:3 imports _x from mere.io.storage",
    ]
    assert foreign_private_attributes(tmp_path) == ["mere.table.ops.write:4 uses t._sql"]
    assert cycles(bad, "mere.table") == [["mere.table.ops.write", "mere.table.table", "mere.table.ops.write"]]
    assert ops_reaching_the_facade(bad) == ["mere.table.ops.write:2 imports mere.table.table"]
    assert io_reaching_up(bad) == ["mere.io.storage:1 imports mere.table.table"]
    assert read_write_crossings(bad) == ["mere.read.reader:1 imports mere.write.writer"]
    assert integrations_reaching_in(bad) == [
        "mere.integrations.x:1 imports the table layer's internal mere.table.commit",
        "mere.integrations.x:3 imports private _hidden from mere.table.table",
    ]
