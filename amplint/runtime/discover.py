"""A model built from its class alone, with inputs made up for it (`amplint check --deep`): no
factory written by hand.

- a transformers `PreTrainedModel` subclass is built from its config class's defaults, shrunk to a
  few blocks, as `--hf-config` builds a model (on the meta device), with the inputs its head takes;
- any other `nn.Module` is called from its constructor's defaults, where a parameter without one is
  annotated with a config class (a dataclass, or a class whose own constructor needs nothing) that
  is then built from its defaults; its forward gets a tensor for each required argument, shaped for
  the first layer that reads it (an embedding's token ids, a linear layer's features, a
  convolution's channels).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import sys
import typing
from pathlib import Path
from typing import Any

from amplint.runtime.target import TargetError, load_module

# Blocks kept of every stack of a transformers config: enough to meet every kind of block.
LAYERS = 2


def build_class(
    path: str, name: str, *, seq_len: int, batch_size: int
) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """The model class `name` of the file at `path`, built, and inputs for its forward."""
    import torch

    cls = getattr(import_file(path), name, None)
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise TargetError(f"{path} has no nn.Module class {name!r}")
    if _is_pretrained(cls):
        from amplint.runtime.hf import build

        return build(cls, layers=LAYERS, seq_len=seq_len, batch_size=batch_size, attn_implementation="eager")
    model = cls(*_constructor_arguments(cls)).eval()
    return model, tuple(_inputs(model, seq_len=seq_len, batch_size=batch_size)), {}


def import_file(path: str) -> Any:
    """The module of a Python file: by its dotted name where it lies in a package (its relative
    imports resolve), from the file itself otherwise."""
    file = Path(path).resolve()
    parts = [file.stem]
    folder = file.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    if len(parts) == 1:
        return load_module(str(file))
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    dotted = ".".join(parts)
    try:
        return importlib.import_module(dotted)
    except ImportError as exc:
        raise TargetError(f"cannot import {dotted} ({file}): {exc}") from None


def _is_pretrained(cls: type) -> bool:
    try:
        from transformers import PreTrainedModel
    except ImportError:
        return False
    return issubclass(cls, PreTrainedModel) and isinstance(getattr(cls, "config_class", None), type)


def _constructor_arguments(cls: type) -> list[Any]:
    """The positional arguments `cls` is built from: a config built from its defaults for each
    parameter that has no default of its own."""
    arguments: list[Any] = []
    hints = _hints(cls.__init__)  # type: ignore[misc]
    for parameter in list(inspect.signature(cls.__init__).parameters.values())[1:]:  # type: ignore[misc]
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if parameter.default is not parameter.empty:
            break
        config = hints.get(parameter.name)
        if not (isinstance(config, type) and _needs_nothing(config)):
            raise TargetError(
                f"{cls.__name__}(...) cannot be built from defaults: its parameter `{parameter.name}` has "
                "no default and is not annotated with a config class whose fields all have defaults"
            )
        arguments.append(config())
    return arguments


def _hints(function: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(function)
    except Exception:  # an annotation that names what the module does not define at run time
        return {}


def _needs_nothing(config: type) -> bool:
    """Whether a config class can be built without arguments (a dataclass whose fields all have
    defaults, or a class whose constructor needs nothing)."""
    if dataclasses.is_dataclass(config):
        return all(
            field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
            for field in dataclasses.fields(config)
            if field.init
        )
    if config.__module__ in ("builtins", "torch") or config.__module__.startswith("torch."):
        return False
    try:
        parameters = list(inspect.signature(config).parameters.values())
    except (TypeError, ValueError):
        return False
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters)


def _inputs(model: Any, *, seq_len: int, batch_size: int) -> list[Any]:
    """A tensor for each argument the model's forward requires, shaped for its first layer."""
    import torch

    required = [
        p
        for p in inspect.signature(model.forward).parameters.values()
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if not required:
        return []
    layers = (torch.nn.Embedding, torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)
    first = next((m for m in model.modules() if isinstance(m, layers)), None)
    generator = torch.Generator().manual_seed(0)
    if isinstance(first, torch.nn.Embedding):
        made = torch.randint(first.num_embeddings, (batch_size, seq_len), generator=generator)
    elif isinstance(first, torch.nn.Linear):
        made = torch.randn(batch_size, seq_len, first.in_features, generator=generator)
    elif isinstance(first, torch.nn.Conv1d):
        made = torch.randn(batch_size, first.in_channels, seq_len, generator=generator)
    elif isinstance(first, (torch.nn.Conv2d, torch.nn.Conv3d)):
        side = (8,) * (2 if isinstance(first, torch.nn.Conv2d) else 3)
        made = torch.randn(batch_size, first.in_channels, *side, generator=generator)
    else:
        raise TargetError(
            f"{type(model).__name__} has no embedding, linear or convolution layer to shape its inputs by"
        )
    return [made] * len(required)
