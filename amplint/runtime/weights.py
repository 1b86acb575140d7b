"""Weights for the values replay: a `.safetensors` file or a saved state dict, checked against the
model's own names and shapes before anything is loaded."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from amplint.runtime.target import TargetError

# A mismatch lists this many names of each kind, then a count.
_SHOWN = 20


class WeightsError(TargetError):
    """The weights cannot be read or do not fit the model; the message lists what differs."""


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"weights file {path} does not exist")
    try:
        if path.suffix == ".safetensors":
            try:
                from safetensors.torch import load_file
            except ImportError:
                raise WeightsError(
                    "reading .safetensors needs safetensors: pip install 'amplint[runtime]'"
                ) from None
            return load_file(str(path), device="cpu")
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except WeightsError:
        raise
    except Exception as exc:
        raise WeightsError(f"cannot read weights from {path}: {type(exc).__name__}: {exc}") from None
    for key in ("state_dict", "model"):  # a training checkpoint that holds the state dict
        if isinstance(loaded, Mapping) and isinstance(loaded.get(key), Mapping):
            loaded = loaded[key]
            break
    if not isinstance(loaded, Mapping) or not all(isinstance(v, torch.Tensor) for v in loaded.values()):
        raise WeightsError(f"{path} holds no state dict (a mapping of names to tensors)")
    return dict(loaded)


def load_weights(model: torch.nn.Module, weights: str | Path | Mapping[str, torch.Tensor]) -> None:
    """Load `weights` (a file or a state dict) into `model`; a model built on the meta device gets
    the loaded tensors themselves. Raises `WeightsError` listing every missing name, unexpected name
    and shape that differs, and loads nothing then."""
    state = read_weights(weights) if isinstance(weights, (str, Path)) else dict(weights)
    expected = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    tied = _tied(model)
    # A tied weight (an LM head sharing the embedding) is saved once, under either name.
    missing = sorted(
        name for name in expected.keys() - state.keys() if not (tied.get(name, set()) & state.keys())
    )
    unexpected = sorted(state.keys() - expected.keys())
    shapes = [
        f"{name}: {list(state[name].shape)} in the weights, {list(expected[name])} in the model"
        for name in sorted(expected.keys() & state.keys())
        if tuple(state[name].shape) != expected[name]
    ]
    problems = [
        f"{title} ({len(items)}):\n"
        + "\n".join(f"  {item}" for item in items[:_SHOWN])
        + (f"\n  ... and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")
        for title, items in (
            ("missing from the weights", missing),
            ("not in the model", unexpected),
            ("shapes that differ", shapes),
        )
        if items
    ]
    if problems:
        raise WeightsError("the weights do not match the model; nothing was replayed\n" + "\n".join(problems))
    on_meta = any(tensor.is_meta for tensor in model.state_dict().values())
    model.load_state_dict(state, assign=on_meta, strict=False)  # strict as checked above, ties aside
    for name, others in tied.items():  # assigning a tensor to one name unties the others: tie again
        source = next((other for other in sorted(others) if other in state), None)
        if name not in state and source is not None:
            owner, _, attribute = name.rpartition(".")
            setattr(model.get_submodule(owner), attribute, model.get_parameter(source))


def _tied(model: torch.nn.Module) -> dict[str, set[str]]:
    """Parameter names that share one parameter, each with the other names of it."""
    names: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), []).append(name)
    return {name: set(group) - {name} for group in names.values() if len(group) > 1 for name in group}
