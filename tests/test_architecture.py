"""The import graph keeps the shape ARCHITECTURE.md draws: no import circles, no rule importing
another rule, the runtime side never importing the static side. Imports under `if TYPE_CHECKING:`
are left out: they name a type for an annotation and create no dependency when the code runs."""

from __future__ import annotations

import ast
from pathlib import Path

import amplint

ROOT = Path(amplint.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(*, typing: bool = False) -> dict[str, set[str]]:
    """Every amplint module and the amplint modules it imports, lazily too (inside a function), and
    for type checking too when `typing` is set."""
    modules = {_module_name(path): path for path in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text("utf-8"))
        typing_only = {
            id(inner)
            for block in ast.walk(tree)
            if not typing and isinstance(block, ast.If) and ast.unparse(block.test).endswith("TYPE_CHECKING")
            for inner in ast.walk(block)
        }
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], base])
                targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):
                    graph[name].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circles() -> None:
    assert _cycles(_imports()) == []


def test_static_layers_import_downward_only() -> None:
    """Within `amplint.static` not even a type-checking import goes back up: a type a lower module
    needs from a higher one is a protocol below both (`amplint.static.parsed`)."""
    static = {
        name: {target for target in targets if target.startswith("amplint.static")}
        for name, targets in _imports(typing=True).items()
        if name.startswith("amplint.static")
    }
    assert _cycles(static) == []


def test_no_static_module_is_over_900_lines() -> None:
    sizes = {
        path.relative_to(ROOT).as_posix(): len(path.read_text("utf-8").splitlines())
        for path in (ROOT / "static").rglob("*.py")
    }
    assert {name: lines for name, lines in sizes.items() if lines > 900} == {}


def test_no_rule_imports_a_rule() -> None:
    for name, targets in _imports().items():
        if name.startswith("amplint.rules.amp"):
            assert not [t for t in targets if t.startswith("amplint.rules.amp")], name


def test_runtime_never_imports_the_static_side() -> None:
    for name, targets in _imports().items():
        if name.startswith("amplint.runtime"):
            assert not [t for t in targets if t.startswith("amplint.static")], name


def test_static_imports_nothing_above_it() -> None:
    allowed = ("amplint.static", "amplint.source")
    for name, targets in _imports().items():
        if name.startswith("amplint.static"):
            assert all(t.startswith(allowed) for t in targets), (name, targets)


# The floors of ARCHITECTURE.md's picture, lowest first: a package imports only floors below its own.
FLOORS = (
    ("amplint.diagnostics", "amplint.source", "amplint.gitignore"),
    ("amplint.static", "amplint.results"),
    ("amplint.rule", "amplint.config"),
    ("amplint.runtime",),
    ("amplint.rules",),
    ("amplint.fixing", "amplint.report", "amplint.docs"),
    ("amplint.lock", "amplint.pipeline"),
    ("amplint.api", "amplint.integrations"),
    ("amplint.cli", "amplint"),
    ("amplint.__main__",),
)
# The one arrow back up: AMP110 compares a trace with the lockfile, so it reads the lockfile's data
# modules, whose package also holds the `amplint lock` command that runs the rules.
BACK_UP = {
    ("amplint.rules.amp110_dtype_change", "amplint.lock.file"),
    ("amplint.rules.amp110_dtype_change", "amplint.lock.diff"),
}


def _floor(module: str) -> int:
    package = ".".join(module.split(".")[:2])
    return next(level for level, names in enumerate(FLOORS) if package in names)


def test_packages_import_only_floors_below() -> None:
    upward = sorted(
        (name, target)
        for name, targets in _imports().items()
        for target in targets
        if _floor(target) >= _floor(name) and name.split(".")[:2] != target.split(".")[:2]
    )
    assert set(upward) == BACK_UP


def test_at_most_twelve_loose_modules() -> None:
    loose = sorted(path.name for path in ROOT.glob("*.py"))
    assert len(loose) <= 12, loose


def test_median_rule_module_is_under_200_lines() -> None:
    sizes = sorted(
        len(path.read_text("utf-8").splitlines()) for path in (ROOT / "rules").glob("amp[0-9]*.py")
    )
    assert sizes[len(sizes) // 2] < 200, sizes
