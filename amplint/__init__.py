"""amplint: a static and runtime linter for PyTorch automatic mixed precision."""

# Nothing is imported here, not even `__future__`: the public names load on first use (PEP 562),
# so that `python -m amplint` reaches `__main__`, which takes the checked repository off the import
# path, before any module that a repository's own `json.py` or `tokenize.py` could stand in for.

__version__ = "0.1.0"

__all__ = [
    "Confidence",
    "Diagnostic",
    "Edit",
    "Fix",
    "Severity",
    "__version__",
    "check_paths",
    "check_source",
]

_HOMES = {
    "check_paths": "amplint.api",
    "check_source": "amplint.api",
    "Confidence": "amplint.diagnostics",
    "Diagnostic": "amplint.diagnostics",
    "Edit": "amplint.diagnostics",
    "Fix": "amplint.diagnostics",
    "Severity": "amplint.diagnostics",
}

TYPE_CHECKING = False
if TYPE_CHECKING:
    from amplint.api import check_paths, check_source
    from amplint.diagnostics import Confidence, Diagnostic, Edit, Fix, Severity


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'amplint' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
