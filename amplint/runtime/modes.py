"""The modes a fix must be right in, and how its values are compared across them.

A model runs in float64 (a reference run), cast to float32, bfloat16 or float16, under CPU autocast
(bfloat16 on float32 weights), or under CUDA autocast (bfloat16 or float16 on float32 weights). The
CUDA mode runs without a GPU: the call is traced on fake `cuda:0` tensors (`amplint.runtime.tracer`,
so CUDA autocast's own kernels pick each op's dtype) and the graph is replayed on CPU on the real
weights and inputs. The rule-example tests and `benchmarks/fix_safety.py` both run code before and
after a fix through `call` and judge the pair with `judge`.

In the cast modes cumulative sums, products and log-sum-exps of half tensors keep their running value
in the half dtype, as CUDA's kernels do (CPU kernels keep it in float32): a model cast to bf16 runs on
a GPU.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from amplint.runtime.compat import FakeTensor, TorchDispatchMode, tree_flatten, tree_leaves, tree_unflatten

__all__ = ["MODES", "Mode", "Run", "call", "error", "judge", "tensors", "ulp"]

HALVES = (torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class Mode:
    name: str
    dtype: torch.dtype  # of the weights and the floating-point inputs
    autocast: str | None = None  # "cpu", or "cuda" (emulated)
    autocast_dtype: torch.dtype | None = None
    # Units in the last place of `precision` by which two equally good results may differ. In float64
    # the unfixed code is the reference itself, so a fix's own rounding is all its error: 2**12 units
    # (2**-40 of the largest magnitude) allow a rewritten formula's rounding and catch any value
    # narrowed to float32 on the way (2**-24).
    noise: int = 1

    @property
    def precision(self) -> torch.dtype:
        """The lowest precision an op runs in: what a result may be rounded to."""
        return self.autocast_dtype or self.dtype


MODES = (
    Mode("float64", torch.float64, noise=2**12),
    Mode("float32", torch.float32),
    Mode("bfloat16", torch.bfloat16),
    Mode("float16", torch.float16),
    Mode("cpu-autocast-bf16", torch.float32, "cpu", torch.bfloat16),
    Mode("cuda-autocast-bf16", torch.float32, "cuda", torch.bfloat16),
    Mode("cuda-autocast-fp16", torch.float32, "cuda", torch.float16),
)


class GpuScans(TorchDispatchMode):
    """Cumulative sums, products and log-sum-exps of half tensors as a GPU computes them: with the
    running value in the half dtype. CPU kernels keep it in float32 and round only the outputs, so on
    CPU a fix that accumulates in float32 and rounds back at once would show no gain, while on an
    H100 it cuts the error 4 to 6 times (measured: docs/rules/AMP007.md)."""

    def __torch_dispatch__(
        self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        step = _SCAN_STEPS.get(func)
        x = args[0] if args else None
        if (
            step is None
            or not isinstance(x, torch.Tensor)
            or x.dtype not in HALVES
            or kwargs.get("dtype")
            or x.numel() == 0
        ):
            return func(*args, **kwargs)
        dim = args[1] % x.dim()
        parts = x.unbind(dim)
        running, out = parts[0], [parts[0]]
        for part in parts[1:]:
            running = step(running.float(), part.float()).to(x.dtype)
            out.append(running)
        return torch.stack(out, dim)


_SCAN_STEPS: dict[Any, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    torch.ops.aten.cumsum.default: torch.add,
    torch.ops.aten.cumprod.default: torch.mul,
    torch.ops.aten.logcumsumexp.default: torch.logaddexp,
}


def call(
    mode: Mode,
    function: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    model: torch.nn.Module | None = None,
) -> Any:
    """`function(*args, **kwargs)` in `mode`; the weights and inputs are already in `mode.dtype`.
    `model`: a module the function uses that is neither it, its owner, nor among its arguments."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated APIs are what some fixes are about
        if mode.autocast is None:
            with GpuScans():
                return function(*args, **kwargs)
        assert mode.autocast_dtype is not None
        if mode.autocast == "cpu":
            with torch.autocast("cpu", dtype=mode.autocast_dtype):
                return function(*args, **kwargs)
        return _emulated_cuda(function, args, kwargs, mode.autocast_dtype, model)


class _Call(torch.nn.Module):
    """A call as a module: the modules it uses (the callee's own, those among its arguments) are its
    children, so the tracer fakes their weights, and its tensor arguments are the forward's inputs."""

    def __init__(
        self,
        function: Callable[..., Any],
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        model: torch.nn.Module | None,
    ) -> None:
        super().__init__()
        self.callee = [function]  # in a list: a module callee is registered once, among the parts
        self.leaves, self.spec = tree_flatten((tuple(args), dict(kwargs)))
        owner = getattr(function, "__self__", function)
        found = [v for v in (model, owner, *self.leaves) if isinstance(v, torch.nn.Module)]
        self.parts = torch.nn.ModuleList(dict.fromkeys(found))
        self.slots = [i for i, v in enumerate(self.leaves) if isinstance(v, torch.Tensor)]

    def inputs(self) -> list[torch.Tensor]:
        return [self.leaves[i] for i in self.slots]

    def forward(self, *tensors: torch.Tensor) -> Any:
        leaves = list(self.leaves)
        for slot, tensor in zip(self.slots, tensors, strict=True):
            leaves[slot] = tensor
        args, kwargs = tree_unflatten(leaves, self.spec)
        return self.callee[0](*args, **kwargs)


def _emulated_cuda(
    function: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    dtype: torch.dtype,
    model: torch.nn.Module | None,
) -> Any:
    from amplint.runtime.tracer import trace

    module = _Call(function, args, kwargs, model)
    got: list[Any] = []
    trace(module, module.inputs(), device="cuda", dtype=dtype, autocast=True, outputs=got.append)
    if any(isinstance(t, FakeTensor) for t in tree_leaves(got)):
        # a tensor the call made from no input (a constant): the trace holds no value for it
        raise TypeError("the traced call returns a tensor that no replayed op computed")
    return got[0]


def tensors(out: object) -> list[torch.Tensor]:
    """The floating-point and integer tensors of an output, in order (through tuples, lists and
    dicts)."""
    if isinstance(out, torch.Tensor):
        return [out.detach()]
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in tensors(item)]
    if isinstance(out, dict):
        return [t for item in out.values() for t in tensors(item)]
    return []


def error(values: Sequence[torch.Tensor], reference: Sequence[torch.Tensor]) -> float:
    """The largest absolute error where the reference is finite; inf where the result is not. An
    integer or boolean output (token ids, lengths) counts the positions that differ from the
    reference instead: the difference of two token ids says nothing of how far apart they are."""
    worst = 0.0
    for value, ref in zip(values, reference, strict=True):
        if not (ref.is_floating_point() or ref.is_complex()):
            same = value.shape == ref.shape
            worst = max(worst, float((value != ref).sum().item()) if same else float(ref.numel()))
            continue
        finite = torch.isfinite(ref)
        if not finite.any():
            continue
        got = value.to(torch.float64)[finite]
        if not torch.isfinite(got).all():
            return math.inf
        worst = max(worst, (got - ref.to(torch.float64)[finite]).abs().max().item())
    return worst


def ulp(dtype: torch.dtype, reference: Sequence[torch.Tensor]) -> float:
    """One unit in the last place of `dtype` at the reference's largest finite magnitude."""
    finite = [ref[torch.isfinite(ref)].abs() for ref in reference if ref.is_floating_point()]
    largest = max((values.max().item() for values in finite if values.numel()), default=0.0)
    return torch.finfo(dtype).eps * largest


@dataclass
class Run:
    """One run's outputs, or why it raised."""

    out: list[torch.Tensor] | None = None
    raised: str | None = None

    @classmethod
    def of(cls, thunk: Callable[[], object]) -> Run:
        try:
            return cls(out=tensors(thunk()))
        except Exception as exc:  # the unfixed code may raise: that is the hazard
            return cls(raised=f"{type(exc).__name__}: {str(exc).strip()[:200]}")

    def layout(self) -> list[tuple[torch.dtype, torch.Size]]:
        return [(t.dtype, t.shape) for t in self.out or ()]


def judge(mode: Mode, before: Run, after: Run, reference: Sequence[torch.Tensor], safe: bool) -> str | None:
    """Why the fixed run is worse than the unfixed one in `mode`, or None.

    A fix may not raise where the unfixed code runs, nor turn a value non-finite where the reference
    is finite. A safe fix keeps the dtypes and shapes of the outputs. No fix makes the error against
    the float64 `reference` larger by more than one unit in the last place of the mode's lowest
    precision at the reference's largest magnitude (`Mode.noise` units in float64): rounding a result
    to that dtype lands either side, so equal errors can differ by that much."""
    if after.raised is not None:
        return None if before.raised is not None else f"raises: {after.raised}"
    assert after.out is not None
    if before.out is not None and safe and after.layout() != before.layout():
        return f"a safe fix changes the outputs from {before.layout()} to {after.layout()}"
    if not reference or (before.out is None and len(after.out) != len(reference)):
        return None
    if len(after.out) != len(reference):
        return f"{len(after.out)} outputs, the reference has {len(reference)}"
    new = error(after.out, reference)
    old = math.inf if before.out is None else error(before.out, reference)
    if new == math.inf and old < math.inf:
        return "not finite where the float64 reference is"
    if new > old + mode.noise * ulp(mode.precision, reference):
        return f"error {new:.3g} against float64, {old:.3g} before the fix"
    return None


def in_every_mode(
    model: torch.nn.Module | None,
    function: Callable[..., Any],
    inputs: Mapping[str, Any],
    modes: Sequence[Mode] = MODES,
) -> dict[str, Run]:
    """`function(**inputs)` run in each mode, with the same weights and inputs: `model`'s floating
    parameters and buffers, and the floating inputs, are cast to the mode's dtype from their values
    as given (a cast from half back to float64 would not give the float64 run the same weights)."""
    held = [] if model is None else [*model.named_parameters(), *model.named_buffers()]
    master = {name: tensor.detach().clone() for name, tensor in held}
    runs: dict[str, Run] = {}
    for mode in modes:
        for name, tensor in held:
            if tensor.is_floating_point():
                tensor.data = master[name].to(mode.dtype)
        cast = {
            k: v.to(mode.dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
            for k, v in inputs.items()
        }
        with torch.no_grad():
            runs[mode.name] = Run.of(partial(call, mode, function, (), cast, model))
    return runs


def save(runs: Mapping[str, Run], path: str) -> dict[str, dict[str, Any]]:
    """Write `runs` to `path` (for `load` in another process) and return what each gave, in words:
    its first output's dtype, shape and finiteness, or why it raised."""
    torch.save({name: (run.out, run.raised) for name, run in runs.items()}, path)
    summary: dict[str, dict[str, Any]] = {}
    for name, run in runs.items():
        if run.raised is not None or not run.out:
            summary[name] = {"error": run.raised or "the output holds no tensor"}
        else:
            first = run.out[0]
            finite = bool(torch.isfinite(first).all()) if first.is_floating_point() else True
            summary[name] = {"dtype": str(first.dtype), "shape": list(first.shape), "finite": finite}
    return summary


def load(path: str) -> dict[str, Run]:
    saved = torch.load(path, weights_only=True)
    return {name: Run(out=out, raised=raised) for name, (out, raised) in saved.items()}
