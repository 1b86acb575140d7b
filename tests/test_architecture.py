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


# The modules that may name private torch and libcst API, each use with the public alternative it
# waits for (issue: a torch or libcst release that moves one changes these files only).
COMPAT_MODULES = frozenset({"amplint.runtime.compat", "amplint.static.cst_compat"})
_LIBRARIES = ("torch", "libcst")
# Private attributes of torch and libcst objects, which a scan of names cannot tie to the library
# (`module._parameters`, `library._destroy()`, a libcst node's `_validate`).
_PRIVATE_MEMBERS = frozenset(
    {"_apply", "_buffers", "_destroy", "_filter_traceback_frames", "_modules", "_non_persistent_buffers_set"}
    | {"_parameters", "_validate"}
)
_PREFIXES = tuple(f"{library}._" for library in _LIBRARIES)  # a private module named in a string
_OVERRIDDEN = frozenset({"_apply", "_validate"})  # what a subclass of a torch or libcst class may override


def _private(part: str) -> bool:
    return part.startswith("_") and not (part.startswith("__") and part.endswith("__"))


def private_library_names(tree: ast.Module) -> list[str]:
    """Each private torch or libcst name the module uses, as `line: name`, in line order."""
    found: set[tuple[int, str]] = set()
    bound: dict[str, str] = {}  # a local name and the library path it was imported as
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top in _LIBRARIES:
                    bound[alias.asname or top] = alias.name if alias.asname else top
                    if any(map(_private, alias.name.split("."))):
                        found.add((node.lineno, alias.name))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in _LIBRARIES:
            for alias in node.names:
                path = f"{node.module}.{alias.name}"
                bound[alias.asname or alias.name] = path
                if any(map(_private, path.split("."))):
                    found.add((node.lineno, path))
    inner = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in inner:
            chain, base = [node.attr], node.value
            while isinstance(base, ast.Attribute):
                chain.append(base.attr)
                base = base.value
            receiver = base.id if isinstance(base, ast.Name) else ""
            if receiver in bound and any(map(_private, chain)):
                found.add((node.lineno, f"{bound[receiver]}.{'.'.join(reversed(chain))}"))
            elif receiver not in {"self", "cls"} and _PRIVATE_MEMBERS & set(chain):
                found.add((node.lineno, "." + ".".join(sorted(_PRIVATE_MEMBERS & set(chain)))))
        elif isinstance(node, ast.ClassDef):  # an override of a library's private method
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name in _OVERRIDDEN:
                    found.add((item.lineno, f"def {item.name}"))
        elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith(("patch.object", "setattr")):
            named = node.args[1] if len(node.args) > 1 else None  # a patch that names the member
            if isinstance(named, ast.Constant) and isinstance(named.value, str) and _private(named.value):
                found.add((node.lineno, f"patch of {named.value}"))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith(_PREFIXES)
        ):
            found.add((node.lineno, repr(node.value)))
    return [f"{line}: {name}" for line, name in sorted(found)]


def test_private_torch_and_libcst_names_only_in_the_compat_modules() -> None:
    used = {
        name: private_library_names(ast.parse(path.read_text("utf-8")))
        for path in ROOT.rglob("*.py")
        if (name := _module_name(path)) not in COMPAT_MODULES
    }
    assert {name: found for name, found in used.items() if found} == {}
    # The compat modules do hold them (the scan sees what it is meant to).
    for name in COMPAT_MODULES:
        path = ROOT.joinpath(*name.split(".")[1:]).with_suffix(".py")
        assert private_library_names(ast.parse(path.read_text("utf-8")))


def test_the_scan_finds_each_kind_of_private_use() -> None:
    source = """
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils import _pytree
import libcst as cst
order = torch._C._get_sdp_priority_order()
F._canonical_mask(None)
module._parameters["w"] = None
library._destroy()
mock.patch.object(TracerBase, "_filter_traceback_frames", keep)
self._parameters = {}
logger = "torch._subclasses.fake_tensor"
class Text(cst.Name):
    def _validate(self): pass
torch.nn.functional.softmax(x, -1)
"""
    found = [entry.split(": ", 1)[1] for entry in private_library_names(ast.parse(source))]
    assert found == [
        "torch._subclasses.fake_tensor.FakeTensor",
        "torch.utils._pytree",
        "torch._C._get_sdp_priority_order",
        "torch.nn.functional._canonical_mask",
        "._parameters",
        "._destroy",
        "patch of _filter_traceback_frames",
        "'torch._subclasses.fake_tensor'",
        "def _validate",
    ]
