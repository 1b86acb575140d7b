# bclm-pytorch 1.0.7, bclm/registry.py (Apache-2.0), trimmed to the model class.
"""
Architecture registry.

Maps the ``"architecture"`` string found in a model's ``config.json`` to
the concrete classes needed to instantiate and run inference.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Type


@dataclass(frozen=True)
class ArchitectureEntry:
    """Bundle of classes that together define a loadable architecture."""

    model_class: Type          # nn.Module subclass (e.g. BCLM1Model)


_REGISTRY: Dict[str, ArchitectureEntry] = {}
_BUILTINS_LOADED: bool = False


def register_architecture(name: str, *, model_class: Type) -> None:
    """Register an architecture so it can be loaded via ``bclm.load()``."""
    _REGISTRY[name] = ArchitectureEntry(model_class=model_class)


def get_architecture(name: str) -> ArchitectureEntry:
    """Look up a registered architecture by name."""
    _ensure_builtins()

    entry = _REGISTRY.get(name)
    if entry is None:
        raise ValueError(f"Unknown architecture {name!r}.")
    return entry


def _ensure_builtins() -> None:
    """Import and register all built-in architectures once."""
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    _BUILTINS_LOADED = True

    _register_bclm1()


def _register_bclm1() -> None:
    """Register the BCLM-1 architecture."""
    from .model import BCLM1Model

    register_architecture("BCLM1Model", model_class=BCLM1Model)
