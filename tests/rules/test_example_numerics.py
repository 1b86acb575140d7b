"""The rule examples run: every example whose data carries a `run` snippet is executed on CPU in
bfloat16, float16 and float32, before and after its fix, against a float64 run of the unfixed code.

A `run` snippet is Python appended to the example's code (and to its fixed code). It sets `out` to
what the code computes (a tensor, a tuple of tensors, or anything else for code whose point is not
a number) and may use:

* `DTYPE`: the dtype of this run (float64 for the reference);
* `tensor(*shape, scale=1.0, positive=False)`: normal noise times `scale`, drawn in float64 from a
  generator seeded the same way in every run and then cast to `DTYPE`, so all runs see the same
  values up to their own rounding;
* `mask(*shape, p=0.5)`: a boolean mask from the same generator;
* `cast(module)`: a module (built after `torch.manual_seed(0)`, so with the same weights in every
  run) moved to `DTYPE`.

Cumulative sums, products and log-sum-exps of half tensors keep their running value in the half
dtype, as CUDA's kernels do (CPU kernels keep it in float32).

Where the unfixed code raises even in float64 (the bug is a crash, not a rounding), the float64 run
of the fixed code is the reference. For a bad example with a fix, in each half dtype and float32:

* the fixed code runs;
* it returns the same dtypes and shapes as the unfixed code (when that ran at all), or the fix is
  offered as unsafe (`--unsafe-fixes`): a fix that hands a consumer another dtype is never applied
  by `--fix` alone;
* it is finite wherever the float64 reference is;
* its error against the reference is no larger than the unfixed code's, give or take one unit in the
  last place of the run's dtype at the reference's largest magnitude (rounding a result to that
  dtype lands either side);
  for the rules whose point is precision, it is smaller in bfloat16 or float16.

Run in float64, the fixed code returns the dtypes the unfixed code returns there and narrows no
float64 value to a lower precision that the unfixed code keeps (an upcast to a plain float32 is a
downcast for float64 code), save the listed fixes whose upcast value has no dtype to read.

A bad example without a fix shows its hazard in bfloat16 or float16: it raises, goes non-finite
where float64 is finite, or is off by more than rounding. Good examples with a `run` snippet must
run in every dtype and stay finite where the reference is.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from amplint.diagnostics import SAFE  # noqa: E402
from amplint.rule import Bad, Good, Rule  # noqa: E402
from amplint.rules import all_rules  # noqa: E402
from amplint.rules.runner import lint_text  # noqa: E402

HALVES = (torch.bfloat16, torch.float16)
DTYPES = (*HALVES, torch.float32)
# Rules whose fix exists to make the numbers better, not only to keep them finite or the API current.
PRECISION = frozenset({"AMP001", "AMP003", "AMP006", "AMP007", "AMP014"})

STATIC = [rule for rule in all_rules() if not rule.runtime_only]
BAD = [(rule, i, ex) for rule in STATIC for i, ex in enumerate(rule.bad) if ex.run and ex.fixed]
UNFIXED = [(rule, i, ex) for rule in STATIC for i, ex in enumerate(rule.bad) if ex.run and not ex.fixed]
GOOD = [(rule, i, ex) for rule in STATIC for i, ex in enumerate(rule.good) if ex.run]


def _id(case: tuple[type[Rule], int, Bad | Good]) -> str:
    return f"{case[0].code}-{case[1]}"


def _namespace(dtype: torch.dtype) -> dict[str, object]:
    generator = torch.Generator().manual_seed(0)

    def tensor(*shape: int, scale: float = 1.0, positive: bool = False) -> torch.Tensor:
        values = torch.randn(*shape, generator=generator, dtype=torch.float64) * scale
        return (values.abs() if positive else values).to(dtype)

    def mask(*shape: int, p: float = 0.5) -> torch.Tensor:
        return torch.rand(*shape, generator=generator, dtype=torch.float64) < p

    def cast(module: torch.nn.Module) -> torch.nn.Module:
        return module.to(dtype)

    return {"DTYPE": dtype, "tensor": tensor, "mask": mask, "cast": cast}


class _GpuScans(TorchDispatchMode):
    """Cumulative sums, products and log-sum-exps of half tensors as a GPU computes them: with
    the running value in the half dtype. CPU kernels keep it in float32 and round only the
    outputs, so on CPU a fix that accumulates in float32 and rounds back at once would show no
    gain, while on an H100 it cuts the error 4 to 6 times (measured: docs/rules/AMP007.md)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        step = _SCAN_STEPS.get(func)
        x = args[0] if args else None
        if step is None or not isinstance(x, torch.Tensor) or x.dtype not in HALVES or kwargs.get("dtype"):
            return func(*args, **kwargs)
        dim = args[1] % x.dim()
        parts = x.unbind(dim)
        running, out = parts[0], [parts[0]]
        for part in parts[1:]:
            running = step(running.float(), part.float()).to(x.dtype)
            out.append(running)
        return torch.stack(out, dim)


_SCAN_STEPS = {
    torch.ops.aten.cumsum.default: torch.add,
    torch.ops.aten.cumprod.default: torch.mul,
    torch.ops.aten.logcumsumexp.default: torch.logaddexp,
}


def execute(code: str, run: str, dtype: torch.dtype) -> object:
    """`out` of the example's code and its `run` snippet, run in `dtype`."""
    namespace = _namespace(dtype)
    torch.manual_seed(0)
    with warnings.catch_warnings(), _GpuScans():
        warnings.simplefilter("ignore")  # deprecated APIs are what some examples are about
        exec(compile(code + "\n" + run, "<example>", "exec"), namespace)
    return namespace["out"]


def tensors(out: object) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in tensors(item)]
    return []


def error(values: list[torch.Tensor], reference: list[torch.Tensor]) -> float:
    """The largest absolute error where the reference is finite; inf where the result is not."""
    worst = 0.0
    for value, ref in zip(values, reference, strict=True):
        finite = torch.isfinite(ref)
        if not finite.any():
            continue
        got = value.detach().to(torch.float64)[finite]
        if not torch.isfinite(got).all():
            return math.inf
        worst = max(worst, (got - ref.detach()[finite]).abs().max().item())
    return worst


def ulp(dtype: torch.dtype, reference: list[torch.Tensor]) -> float:
    """One unit in the last place of `dtype` at the reference's largest magnitude."""
    finite = [ref.detach()[torch.isfinite(ref)].abs() for ref in reference]
    largest = max((values.max().item() for values in finite if values.numel()), default=0.0)
    return torch.finfo(dtype).eps * largest


def attempt(function: Callable[[], object]) -> tuple[object, BaseException | None]:
    try:
        return function(), None
    except Exception as exc:  # the unfixed code may raise: that is the hazard
        return None, exc


@pytest.mark.parametrize("case", BAD, ids=_id)
def test_the_fix_keeps_dtypes_and_does_not_lose_precision(case: tuple[type[Rule], int, Bad]) -> None:
    rule, _, example = case
    assert example.fixed is not None, "a `run` snippet on a bad example needs its fixed code"
    fixes = [d.fix for d in lint_text(example.code, [rule]).diagnostics if d.fix is not None]
    safe = all(fix.applicability == SAFE for fix in fixes)
    # The float64 run of the unfixed code; where even that raises (the bug is a crash, not a
    # rounding), the fixed code's float64 run is the reference.
    unfixed, crashed = attempt(lambda: execute(example.code, example.run, torch.float64))
    reference = tensors(unfixed if crashed is None else execute(example.fixed, example.run, torch.float64))
    improved = []
    for dtype in DTYPES:
        before, raised = attempt(lambda dtype=dtype: execute(example.code, example.run, dtype))
        after = execute(example.fixed, example.run, dtype)
        if raised is None:
            assert type(after) is type(before)
            kept = [(t.dtype, t.shape) for t in tensors(after)] == [
                (t.dtype, t.shape) for t in tensors(before)
            ]
            # A fix that hands its consumers another dtype may only be offered as unsafe.
            assert kept or not safe, f"{dtype}: a safe fix changes the output dtypes"
        fixed = tensors(after)
        assert len(fixed) == len(reference)
        for value, ref in zip(fixed, reference, strict=True):
            finite = torch.isfinite(ref)
            assert torch.isfinite(value.detach()[finite]).all(), f"{dtype}: not finite where float64 is"
        if not reference:
            continue
        old = math.inf if raised is not None else error(tensors(before), reference)
        new = error(fixed, reference)
        # Rounding the result to the dtype the unfixed code returned may land either side.
        assert new <= old + ulp(dtype, reference), f"{dtype}: error {new:.3g} after the fix, {old:.3g} before"
        improved.append(dtype in HALVES and new < old)
    if rule.code in PRECISION and reference:
        assert any(improved), "the fix should be more precise in bfloat16 or float16 on this example"


@pytest.mark.parametrize("case", UNFIXED, ids=_id)
def test_a_bad_example_without_a_fix_shows_its_hazard(case: tuple[type[Rule], int, Bad]) -> None:
    """In bfloat16 or float16 it raises, goes non-finite where float64 is finite, or is off by more
    than rounding its result to that dtype (two units in the last place at the largest magnitude)."""
    _, _, example = case
    reference = tensors(execute(example.code, example.run, torch.float64))
    shown = []
    for dtype in HALVES:
        out, raised = attempt(lambda dtype=dtype: execute(example.code, example.run, dtype))
        shown.append(raised is not None or error(tensors(out), reference) > 2 * ulp(dtype, reference))
    assert any(shown), "the example computes as well in half precision as rounding allows"


@pytest.mark.parametrize("case", GOOD, ids=_id)
def test_good_examples_run(case: tuple[type[Rule], int, Good]) -> None:
    _, _, example = case
    reference = tensors(execute(example.code, example.run, torch.float64))
    for dtype in DTYPES:
        values = tensors(execute(example.code, example.run, dtype))
        assert len(values) == len(reference)
        for value, ref in zip(values, reference, strict=True):
            assert torch.isfinite(value.detach()[torch.isfinite(ref)]).all(), dtype


def test_every_rule_with_fixes_has_runnable_examples() -> None:
    """Each static rule that offers fixes has at least one bad example that the harness runs."""
    missing = [rule.code for rule in STATIC if rule.fixable() and not any(ex.run for ex in rule.bad)]
    assert missing == []


# Fixes that still upcast to a plain float32: the value they upcast has no one tensor to read its
# dtype from without computing it twice (`amplint.static.consumers.upcast_dtype`).
FLOAT32_UPCASTS = {
    "AMP001-4": "`(a + b)`: the sum of two tensors",
    "AMP003-1": "`student(x)`: a module's output",
    "AMP006-2": "`(x - u)`: two tensors, though `u` is a mean of `x`",
}


class _Narrowings(TorchDispatchMode):
    """Counts the ops that take a float64 tensor and return a floating tensor of less precision:
    an upcast written as `.float()` or `dtype=torch.float32` does that to float64 code."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        inputs = [a for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        if any(t.dtype == torch.float64 for t in inputs) and any(
            t.is_floating_point() and t.dtype != torch.float64
            for t in torch.utils._pytree.tree_leaves(out)
            if isinstance(t, torch.Tensor)
        ):
            self.ops.append(str(func))
        return out


def narrowings(code: str, run: str) -> list[str]:
    with _Narrowings() as mode:
        execute(code, run, torch.float64)
    return mode.ops


@pytest.mark.parametrize("case", BAD, ids=_id)
def test_the_fix_keeps_float64_code_in_float64(case: tuple[type[Rule], int, Bad]) -> None:
    """An upcast to float32 is a downcast for float64 code: run in float64, the fixed code returns
    the dtypes the unfixed code returns there, and narrows no float64 value the unfixed code keeps."""
    _, _, example = case
    before, raised = attempt(lambda: execute(example.code, example.run, torch.float64))
    if raised is not None:
        return  # the bug is a crash: the fixed code's float64 run is the reference of the test above
    after = execute(example.fixed or "", example.run, torch.float64)
    kept = narrowings(example.code, example.run)
    narrowed = narrowings(example.fixed or "", example.run)
    if _id(case) in FLOAT32_UPCASTS:
        assert narrowed != kept, "the fix keeps float64 now: take it off FLOAT32_UPCASTS"
    else:
        assert [(t.dtype, t.shape) for t in tensors(after)] == [(t.dtype, t.shape) for t in tensors(before)]
        assert narrowed == kept, f"the fixed code narrows float64 values: {narrowed}"
