"""The rule examples run: every example whose data carries a `run` snippet is executed before and after
its fix in every mode of `amplint.runtime.modes` (float64; float32, bfloat16 and float16 casts; CPU
autocast in bfloat16; the emulated CUDA autocast in bfloat16 and float16) against a float64 run of
the unfixed code, with the same weights and inputs.

A `run` snippet is Python appended to the example's code (and to its fixed code). It sets `out` to
what the code computes (a tensor, a tuple of tensors, or anything else for code whose point is not
a number) and may use:

* `DTYPE`: the dtype of the weights and inputs of this run (float64 for the reference, float32
  under autocast);
* `tensor(*shape, scale=1.0, positive=False)`: normal noise times `scale`, drawn in float64 from a
  generator seeded the same way in every run and then cast to `DTYPE`, so all runs see the same
  values up to their own rounding;
* `mask(*shape, p=0.5)`: a boolean mask from the same generator;
* `cast(module)`: a module (built after `torch.manual_seed(0)`, so with the same weights in every
  run) moved to `DTYPE`.

When its last statement is `out = f(...)` with `f` a function, a method or a module, that call is
what runs in the mode (the rest of the snippet builds its weights and inputs); otherwise the whole
snippet runs in it. The emulated CUDA autocast traces the call, so it runs only examples of the first
kind (the others train, step optimizers or read gradients: `NOT_TRACED` names them).

Where the unfixed code raises even in float64 (the bug is a crash, not a rounding), the float64 run
of the fixed code is the reference. For a bad example with a fix, in every mode
(`amplint.runtime.modes.judge`):

* the fixed code runs where the unfixed code runs (and, outside the emulation, everywhere);
* a safe fix keeps the dtypes and shapes of the outputs: a fix that hands a consumer another dtype
  is offered as unsafe (`--unsafe-fixes`);
* it is finite wherever the float64 reference is;
* its error against the reference is no larger than the unfixed code's, give or take one unit in the
  last place of the mode's lowest precision at the reference's largest magnitude (rounding a result
  to that dtype lands either side; in float64, where the unfixed code is the reference itself,
  2**12 units: a rewritten formula rounds otherwise, a value narrowed to float32 is caught);
  for the rules whose point is precision, it is smaller in bfloat16 or float16 (save the examples
  whose upcast value is returned and cast back there, `NO_GAIN_AT_RETURN`).

Run in float64, the fixed code returns the dtypes the unfixed code returns there and narrows no
float64 value to a lower precision that the unfixed code keeps (an upcast to a plain float32 is a
downcast for float64 code), save the listed fixes whose upcast value has no dtype to read.

A bad example without a fix shows its hazard in bfloat16 or float16: it raises, goes non-finite
where float64 is finite, or is off by more than rounding. Good examples with a `run` snippet must
run in the cast modes and stay finite where the reference is; they have no fix to compare, and a
good example claims only that its rule has nothing to say (under float16 autocast AMP002's upcast
before a product is undone, which AMP102 reports).
"""

from __future__ import annotations

import ast
import types
import warnings

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from amplint.diagnostics import SAFE  # noqa: E402
from amplint.rule import Bad, Good, Rule  # noqa: E402
from amplint.rules import all_rules  # noqa: E402
from amplint.rules.runner import lint_text  # noqa: E402
from amplint.runtime.modes import HALVES, MODES, Mode, Run, call, error, judge, tensors, ulp  # noqa: E402

FLOAT64, *_ = MODES
CASTS = [mode for mode in MODES if mode.autocast is None and mode is not FLOAT64]
# Rules whose fix exists to make the numbers better, not only to keep them finite or the API current.
PRECISION = frozenset({"AMP001", "AMP003", "AMP006", "AMP007", "AMP014"})
# Examples whose upcast value is returned: the fix casts it back there (a caller the file does not
# show may meet it with half weights), so the function's own output is rounded to the half dtype
# once, as before, and gains nothing measurable here; the float32 the caller would want is the
# caller's to ask for. Checked both ways: an example that gains comes off the list.
NO_GAIN_AT_RETURN = {
    "AMP001-2": "`logsigmoid(...) / 16` returned: one rounding either way",
    "AMP001-4": "`exp(cumsum(tanh(a + b)))` returned: the rounding of the result dominates",
}

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


class NotTraced(Exception):
    """The snippet does not end in one call, so the emulated CUDA autocast has nothing to trace."""


def _final_call(run: str) -> tuple[str, ast.Call] | None:
    """The snippet before its last statement and that statement's call, when it is `out = f(...)`
    without `*` or `**` arguments."""
    tree = ast.parse(run)
    last = tree.body[-1] if tree.body else None
    if not (
        isinstance(last, ast.Assign)
        and [ast.unparse(t) for t in last.targets] == ["out"]
        and isinstance(last.value, ast.Call)
        and not any(isinstance(a, ast.Starred) for a in last.value.args)
        and all(k.arg for k in last.value.keywords)
    ):
        return None
    return ast.unparse(ast.Module(tree.body[:-1], [])), last.value


def _callable(value: object) -> bool:
    return isinstance(value, (types.FunctionType, types.MethodType, torch.nn.Module))


def _ran_in(mode: Mode, source: str, namespace: dict[str, object]) -> None:
    """Run `source` in `namespace`, in `mode` outside the emulated CUDA autocast (which traces only a
    call: there it builds the call's weights and inputs)."""
    compiled = compile(source, "<example>", "exec")
    if mode.autocast == "cuda":
        exec(compiled, namespace)
    else:
        call(mode, exec, (compiled, namespace), {})


def execute(code: str, run: str, mode: Mode) -> object:
    """`out` of the example's code and its `run` snippet, run in `mode`."""
    namespace = _namespace(mode.dtype)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated APIs are what some examples are about
        exec(compile(code, "<example>", "exec"), namespace)
        final = _final_call(run)
        if final is None:
            if mode.autocast == "cuda":
                raise NotTraced
            _ran_in(mode, run, namespace)
            return namespace["out"]
        setup, node = final
        _ran_in(mode, setup, namespace)

        def value(expression: ast.expr) -> object:
            return eval(compile(ast.Expression(expression), "<example>", "eval"), namespace)

        function = value(node.func)
        if not _callable(function):
            if mode.autocast == "cuda":
                raise NotTraced
            _ran_in(mode, ast.unparse(ast.Module(ast.parse(run).body[-1:], [])), namespace)
            return namespace["out"]
        args = [value(a) for a in node.args]
        kwargs = {k.arg: value(k.value) for k in node.keywords if k.arg}
        return call(mode, function, args, kwargs)


# Examples whose `run` does not end in one call of their code, so the emulated CUDA autocast does
# not run them (it traces a call on fake CUDA tensors): why, in words.
NOT_TRACED = {
    "AMP008-0": "a training step with a GradScaler: the weights it updated are the output",
    "AMP008-2": "the output and a gradient from backward()",
    "AMP008-3": "two calls, one of a custom Function's forward on a namespace",
    "AMP008-4": "a call and the state of a GradScaler",
    "AMP008-1": "a call and the state of a GradScaler",
    "AMP008-6": "a scaled backward(): the gradients are the output",
    "AMP015-0": "the loss and gradients from backward()",
    "AMP015-1": "outputs and gradients from backward()",
    "AMP015-3": "the output and a gradient from backward()",
    "AMP015-5": "the output and gradients from backward()",
    "AMP019-0": "the parameters after optimizer steps",
    "AMP019-1": "the parameters after optimizer steps",
}


def _reference(example: Bad) -> list[torch.Tensor]:
    """The float64 run of the unfixed code; where even that raises (the bug is a crash, not a
    rounding), the fixed code's float64 run."""
    unfixed = Run.of(lambda: execute(example.code, example.run or "", FLOAT64))
    if unfixed.out is not None:
        return unfixed.out
    return tensors(execute(example.fixed or "", example.run or "", FLOAT64))


@pytest.mark.parametrize("case", BAD, ids=_id)
def test_the_fix_is_right_in_every_mode(case: tuple[type[Rule], int, Bad]) -> None:
    rule, _, example = case
    assert example.fixed is not None and example.run is not None
    fixes = [d.fix for d in lint_text(example.code, [rule]).diagnostics if d.fix is not None]
    safe = all(fix.applicability == SAFE for fix in fixes)
    reference = _reference(example)
    failures, improved, traced = [], [], []
    for mode in MODES:
        before = Run.of(lambda mode=mode: execute(example.code, example.run, mode))
        after = Run.of(lambda mode=mode: execute(example.fixed, example.run, mode))
        if mode.autocast == "cuda":
            traced.append(not (before.raised or "").startswith("NotTraced"))
        why = judge(mode, before, after, reference, safe)
        if after.raised is not None and mode.autocast != "cuda":
            failures.append(f"{mode.name}: the fixed code raises: {after.raised}")
        elif mode is FLOAT64 and _id(case) in FLOAT32_UPCASTS:
            assert why is not None, "the fix keeps float64 now: take it off FLOAT32_UPCASTS"
        elif why is not None:
            failures.append(f"{mode.name}: {why}")
        elif mode in CASTS and mode.dtype in HALVES and reference and before.out is not None:
            improved.append(error(after.out or [], reference) < error(before.out, reference))
        elif mode in CASTS and mode.dtype in HALVES and before.out is None:
            improved.append(True)  # the unfixed code raised there
    assert failures == []
    assert all(traced) == (_id(case) not in NOT_TRACED), "update NOT_TRACED"
    if rule.code in PRECISION and reference and _id(case) in NO_GAIN_AT_RETURN:
        assert not any(improved), "the fix gains on this example now: take it off NO_GAIN_AT_RETURN"
    elif rule.code in PRECISION and reference:
        assert any(improved), "the fix should be more precise in bfloat16 or float16 on this example"


@pytest.mark.parametrize("case", UNFIXED, ids=_id)
def test_a_bad_example_without_a_fix_shows_its_hazard(case: tuple[type[Rule], int, Bad]) -> None:
    """In bfloat16 or float16 it raises, goes non-finite where float64 is finite, or is off by more
    than rounding its result to that dtype (two units in the last place at the largest magnitude)."""
    _, _, example = case
    reference = tensors(execute(example.code, example.run or "", FLOAT64))
    shown = []
    for mode in CASTS:
        if mode.dtype in HALVES:
            run = Run.of(lambda mode=mode: execute(example.code, example.run or "", mode))
            shown.append(run.out is None or error(run.out, reference) > 2 * ulp(mode.dtype, reference))
    assert any(shown), "the example computes as well in half precision as rounding allows"


@pytest.mark.parametrize("case", GOOD, ids=_id)
def test_good_examples_run(case: tuple[type[Rule], int, Good]) -> None:
    _, _, example = case
    reference = tensors(execute(example.code, example.run or "", FLOAT64))
    for mode in CASTS:
        values = tensors(execute(example.code, example.run or "", mode))
        assert len(values) == len(reference), mode.name
        for value, ref in zip(values, reference, strict=True):
            assert torch.isfinite(value[torch.isfinite(ref)]).all(), mode.name


def test_every_rule_with_fixes_has_runnable_examples() -> None:
    """Each static rule that offers fixes has at least one bad example that the harness runs."""
    missing = [rule.code for rule in STATIC if rule.fixable() and not any(ex.run for ex in rule.bad)]
    assert missing == []


# Fixes that still upcast to a plain float32: the value they upcast has no one tensor to read its
# dtype from without computing it twice (`amplint.static.consumers.upcast_dtype`), and AMP006's fix
# does not bind it to a name (`amplint.static.consumers.bind_input`). In float64 they
# narrow the value to float32 (the six-mode test sees the error; it fails once they keep float64).
FLOAT32_UPCASTS = {
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
        execute(code, run, FLOAT64)
    return mode.ops


@pytest.mark.parametrize("case", [case for case in BAD if _id(case) not in FLOAT32_UPCASTS], ids=_id)
def test_the_fix_keeps_float64_code_in_float64(case: tuple[type[Rule], int, Bad]) -> None:
    """An upcast to float32 is a downcast for float64 code: run in float64, the fixed code returns
    the dtypes the unfixed code returns there, and narrows no float64 value the unfixed code keeps."""
    _, _, example = case
    run = example.run or ""
    before = Run.of(lambda: execute(example.code, run, FLOAT64))
    if before.out is None:
        return  # the bug is a crash: the fixed code's float64 run is the reference of the test above
    after = tensors(execute(example.fixed or "", run, FLOAT64))
    kept = narrowings(example.code, run)
    narrowed = narrowings(example.fixed or "", run)
    assert [(t.dtype, t.shape) for t in after] == before.layout()
    assert narrowed == kept, f"the fixed code narrows float64 values: {narrowed}"
