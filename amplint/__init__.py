"""amplint: a static and runtime linter for PyTorch automatic mixed precision."""

from __future__ import annotations

from amplint.api import check_paths, check_source
from amplint.diagnostics import Confidence, Diagnostic, Edit, Fix, Severity

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
