"""What each tool reports on the float16 overflows of cases 2 and 5: transformers'
`DebugUnderflowOverflow`, a forward-hook NaN detector, and amplint's values replay (AMP105).

    python benchmarks/values_vs_peers.py

The fixtures run in float16 on CPU (`model.half()`, as `torch_dtype=torch.float16` loads them). The
two detectors watch module outputs during a real forward pass; amplint replays the traced graph
against float64. Needs torch and transformers.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from amplint.runtime.target import load_factory

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
CASES = {
    "case 2: Qwen2-style eager attention with large q/k biases": ("qwen2_fp16_overflow.py", "factory"),
    "case 5: float16 logits overflowing before top-p sampling": ("sampling_overflow.py", "factory"),
}


def _half(factory: Callable[[], tuple[nn.Module, tuple[Any, ...]]]) -> tuple[nn.Module, tuple[Any, ...]]:
    model, args = factory()
    args = tuple(a.half() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)
    return model.half(), args


def debug_underflow_overflow(factory: Callable[[], tuple[nn.Module, tuple[Any, ...]]]) -> str:
    from transformers.debug_utils import DebugUnderflowOverflow

    model, args = _half(factory)
    DebugUnderflowOverflow(model, max_frames_to_save=4)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), torch.no_grad():
        try:
            model(*args)
            outcome = "the forward pass finished"
        except Exception as exc:
            outcome = f"{type(exc).__name__}: {str(exc).splitlines()[0][:110]}"
    return printed.getvalue().rstrip() + f"\n[{outcome}]"


def hook_detector(factory: Callable[[], tuple[nn.Module, tuple[Any, ...]]]) -> str:
    """The usual hand-written detector: the first module whose output holds inf or NaN."""
    model, args = _half(factory)
    found: list[str] = []
    names = {module: name or type(module).__name__ for name, module in model.named_modules()}

    def check(module: nn.Module, inputs: Any, output: Any) -> None:
        for tensor in _tensors(output):
            if tensor.is_floating_point() and not torch.isfinite(tensor).all():
                found.append(f"non-finite output of module {names[module]} ({type(module).__name__})")
                return

    for module in model.modules():
        module.register_forward_hook(check)
    with torch.no_grad():
        try:
            model(*args)
            outcome = "the forward pass finished"
        except Exception as exc:
            outcome = f"{type(exc).__name__}: {str(exc).splitlines()[0][:110]}"
    first = found[0] if found else "nothing detected"
    return f"first: {first}\n[{outcome}]"


def _tensors(output: Any) -> list[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return [output]
    values = (
        output
        if isinstance(output, (tuple, list))
        else vars(output).values()
        if hasattr(output, "__dict__")
        else ()
    )
    return [value for value in values if isinstance(value, torch.Tensor)]


def amplint_values(factory: Callable[[], tuple[nn.Module, tuple[Any, ...]]]) -> str:
    from amplint.fixing.confirm import graph_findings
    from amplint.runtime import replay

    model, args = factory()
    graph = replay(model, args, autocast=False, param_dtype=torch.float16)
    findings = [d for d in graph_findings(graph, "fixture") if d.code == "AMP105"]
    return "\n".join(
        f"{d.path}:{d.line}:{d.column}: {d.code} {d.message}\n  help: {d.help}" for d in findings
    )


def main() -> None:
    tools = {
        "transformers DebugUnderflowOverflow": debug_underflow_overflow,
        "forward-hook NaN detector": hook_detector,
        "amplint trace --values (AMP105)": amplint_values,
    }
    for case, (file, name) in CASES.items():
        factory = load_factory(f"{FIXTURES / file}:{name}")
        print(f"## {case} ({file}:{name}, float16)\n")
        for tool, run in tools.items():
            print(f"### {tool}\n\n```\n{run(factory)}\n```\n")


if __name__ == "__main__":
    main()
