"""Resolve names through a module's imports, so that `th.sigmoid`, `F.softmax` and a bare
`sigmoid` imported from torch are recognised by what they are, not by how they are spelled."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst


def dotted_name(node: cst.BaseExpression) -> str | None:
    """`a.b.c` for a chain of attributes on a name; None for anything else."""
    parts: list[str] = []
    while type(node) is cst.Attribute:  # no subclasses; a failing `isinstance` costs a Python call
        parts.append(node.attr.value)
        node = node.value
    if not isinstance(node, cst.Name):
        return None
    parts.append(node.value)
    return ".".join(reversed(parts))


def last_name(node: cst.BaseExpression | None) -> str:
    """`c` for a name `c` or an attribute `a.b.c`; "" for anything else."""
    if isinstance(node, cst.Name):
        return node.value
    return node.attr.value if isinstance(node, cst.Attribute) else ""


def _module_name(node: cst.BaseExpression) -> str:
    name = dotted_name(node)
    assert name is not None, "import targets are always dotted names"
    return name


def import_aliases(node: cst.Import | cst.ImportFrom) -> Iterator[tuple[str, str]]:
    """(local name, qualified name) pairs that an import statement binds."""
    if isinstance(node, cst.Import):
        for alias in node.names:
            module = _module_name(alias.name)
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                yield alias.asname.name.value, module
            else:
                # `import torch.nn.functional` binds only `torch`.
                root = module.split(".")[0]
                yield root, root
        return
    if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
        return
    module = _module_name(node.module)
    for alias in node.names:
        name = _module_name(alias.name)
        local = name
        if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
            local = alias.asname.name.value
        yield local, f"{module}.{name}"


class ImportMap:
    """Local names bound by import statements anywhere in a module, to their qualified names."""

    def __init__(self, aliases: dict[str, str]) -> None:
        self.aliases = aliases

    def qualified(self, node: cst.BaseExpression) -> str | None:
        """`torch.nn.functional.softmax` for `F.softmax` after `import torch.nn.functional as F`."""
        name = dotted_name(node)
        if name is None:
            return None
        root, _, rest = name.partition(".")
        target = self.aliases.get(root)
        if target is None:
            return None
        return f"{target}.{rest}" if rest else target

    def alias_for(self, qualified: str) -> str | None:
        """The local name the module uses for `qualified` (e.g. `th` for `torch`), if any."""
        return next((local for local, target in self.aliases.items() if target == qualified), None)
