"""Fixes that rewrite an API or a statement keep what the code meant, in every dtype and mode torch
gives it, and their help text is the edit they write."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from amplint.diagnostics import Diagnostic
from amplint.fixing.edits import fix_source
from amplint.rules import rule_by_code
from amplint.rules.runner import lint_text
from amplint.source import LineIndex, decode_source

torch = pytest.importorskip("torch")

EXACT = ("AMP004", "AMP008", "AMP015", "AMP021")


def _fixed(code: str, *codes: str) -> str:
    rules = [rule_by_code(c) for c in codes]
    return fix_source(
        decode_source(code.encode(), Path("example.py")), rules, "example.py", unsafe=True, conditional=True
    ).new_text


def _added(text: str, diagnostic: Diagnostic) -> list[str]:
    """What each edit of the fix writes beyond the text it keeps (an inserted decorator line keeps
    the decorator it follows), with its line breaks and indentation collapsed; `import torch` left out."""
    assert diagnostic.fix is not None
    lines = LineIndex(text)
    added = []
    for edit in diagnostic.fix.edits:
        old = text[lines.offset(edit.line, edit.column) : lines.offset(edit.end_line, edit.end_column)]
        new = edit.content.removeprefix(old) if old else edit.content
        if new.strip() != "import torch":
            added.append(" ".join(new.split()))
    return added


@pytest.mark.parametrize("code", EXACT)
def test_the_help_text_is_the_edit_written(code: str) -> None:
    rule = rule_by_code(code)
    checked = 0
    for example in rule.bad:
        for diagnostic in lint_text(example.code, [rule]).diagnostics:
            if diagnostic.fix is None:
                continue
            added = _added(example.code, diagnostic)
            assert diagnostic.help is not None
            assert all(f"`{part}`" in diagnostic.help for part in added), (diagnostic.help, added)
            checked += 1
    assert checked


def _autocast_dtype(call: str, device: str, enclosing: torch.dtype) -> torch.dtype:
    """The dtype an autocast call made inside an autocast region of `enclosing` computes in (a
    region sets the device's autocast dtype, which `torch.amp.autocast` without one inherits)."""
    before = torch.get_autocast_dtype(device)
    torch.set_autocast_dtype(device, enclosing)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the deprecated API, and CUDA autocast without CUDA
            return eval(call, {"torch": torch}).fast_dtype
    finally:
        torch.set_autocast_dtype(device, before)


@pytest.mark.parametrize(
    "call",
    [
        "torch.cuda.amp.autocast()",
        "torch.cpu.amp.autocast()",
        "torch.cuda.amp.autocast(True)",
        "torch.cuda.amp.autocast(enabled=False)",
        "torch.cuda.amp.autocast(dtype=torch.bfloat16)",
        "torch.cpu.amp.autocast(True, torch.float16, False)",
    ],
)
def test_the_autocast_rewrite_keeps_the_old_default_dtype(call: str) -> None:
    """`torch.amp.autocast(device)` without a dtype takes an enclosing region's: nested in a region
    of the other half dtype, a bare rename would compute in that one."""
    source = f"import torch\n\nregion = {call}\n"
    fixed = _fixed(source, "AMP008").splitlines()[-1].removeprefix("region = ")
    assert fixed.startswith("torch.amp.autocast(")
    device = call.split(".")[1]
    for enclosing in (torch.float16, torch.bfloat16):
        assert _autocast_dtype(fixed, device, enclosing) == _autocast_dtype(call, device, enclosing)


def test_the_cpu_autocast_rewrite_computes_in_the_old_dtype_inside_another_region() -> None:
    """Measured as the issue did: a Linear under the rewritten CPU autocast, nested in a float16 region."""
    source = "import torch\n\n\ndef run(linear, x):\n    with torch.cpu.amp.autocast():\n        return linear(x)\n"
    outputs = {}
    for name, code in (("old", source), ("fixed", _fixed(source, "AMP008"))):
        namespace: dict[str, object] = {}
        exec(code, namespace)
        torch.manual_seed(0)
        with warnings.catch_warnings(), torch.autocast("cpu", dtype=torch.float16):
            warnings.simplefilter("ignore")
            outputs[name] = namespace["run"](torch.nn.Linear(4, 2), torch.randn(3, 4))  # type: ignore[operator]
    assert outputs["old"].dtype == outputs["fixed"].dtype == torch.bfloat16
    assert torch.equal(outputs["old"], outputs["fixed"])


@pytest.mark.parametrize(
    "call",
    [
        "torch.cuda.amp.GradScaler()",
        "torch.cuda.amp.GradScaler(2.0**14, 3.0, 0.25, 10, False)",
        "torch.cpu.amp.GradScaler(1024.0, enabled=True)",
    ],
)
def test_the_grad_scaler_rewrite_keeps_every_argument(call: str) -> None:
    """`torch.amp.GradScaler(device, init_scale, growth_factor, ...)`: the old positional order
    follows the device."""
    source = f"import torch\n\nscaler = {call}\n"
    fixed = _fixed(source, "AMP008").splitlines()[-1].removeprefix("scaler = ")
    assert fixed.startswith("torch.amp.GradScaler(")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the deprecated API, and a CUDA scaler without CUDA
        old, new = eval(call, {"torch": torch}), eval(fixed, {"torch": torch})
    assert type(new) is torch.amp.GradScaler and isinstance(old, torch.amp.GradScaler)
    # Every setting the constructor keeps (a CUDA scaler without CUDA keeps only that it is off).
    assert vars(new) == vars(old) and "_device" in vars(new)


def test_an_autocast_with_keyword_arguments_unpacked_gets_no_fix() -> None:
    """`**kwargs` may hold a dtype: adding `dtype=` could pass it twice."""
    result = lint_text(
        "import torch\n\nregion = torch.cuda.amp.autocast(**settings)\n", [rule_by_code("AMP008")]
    )
    (finding,) = result.diagnostics
    assert finding.fix is None
    assert finding.help is not None and "dtype=torch.float16" in finding.help


JOINED = """\
import torch


def predict(linear, x):
    with torch.autocast("cpu", dtype=torch.bfloat16) and torch.no_grad():
        return linear(x), torch.is_grad_enabled()
"""


def test_context_managers_joined_by_and_are_all_entered_after_the_fix() -> None:
    fixed = _fixed(JOINED, "AMP021")
    assert 'with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():' in fixed
    results = {}
    for name, code in (("old", JOINED), ("fixed", fixed)):
        namespace: dict[str, object] = {}
        exec(code, namespace)
        results[name] = namespace["predict"](torch.nn.Linear(4, 2), torch.randn(3, 4))  # type: ignore[operator]
    # Before, only `no_grad` was entered: float32 and no autocast; after, both.
    assert results["old"][0].dtype == torch.float32 and results["old"][1] is False
    assert results["fixed"][0].dtype == torch.bfloat16 and results["fixed"][1] is False


def test_the_joined_deprecated_autocast_gets_both_fixes() -> None:
    source = "import torch\n\nwith torch.cuda.amp.autocast() and torch.no_grad():\n    pass\n"
    assert 'with torch.amp.autocast("cuda", dtype=torch.float16), torch.no_grad():' in _fixed(
        source, "AMP008", "AMP021"
    )


FUNCTION = """\
import torch


class LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return x.mm(weight.t())

    @staticmethod
    def backward(ctx, grad_output):
        x, weight = ctx.saved_tensors
        return grad_output.mm(weight), grad_output.t().mm(x)


def step(x, weight):
    return LinearFunction.apply(x, weight)
"""


def _backward_under_cpu_autocast(code: str) -> torch.Tensor:
    namespace: dict[str, object] = {}
    exec(code, namespace)
    x = torch.randn(4, 8, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = namespace["step"](x, torch.randn(6, 8, requires_grad=True))  # type: ignore[operator]
    y.float().sum().backward()
    assert x.grad is not None
    return x.grad


def test_the_custom_function_fix_covers_cpu_autocast() -> None:
    """Unfixed, the bfloat16 gradient meets the float32 saved weight; a `device_type="cuda"` pair
    leaves that crash under CPU autocast; the fix's pair does not."""
    with pytest.raises(RuntimeError, match="same dtype"):
        _backward_under_cpu_autocast(FUNCTION)
    fixed = _fixed(FUNCTION, "AMP015")
    with pytest.raises(RuntimeError, match="same dtype"):
        _backward_under_cpu_autocast(
            fixed.replace('"cuda" if torch.cuda.is_available() else "cpu"', '"cuda"')
        )
    assert _backward_under_cpu_autocast(fixed).dtype == torch.float32


def test_two_stacked_decorator_pairs_restore_the_wrong_state() -> None:
    """Why the fix writes one pair: stacked pairs share `ctx._dtype` and `ctx._fwd_used_autocast`,
    so the outer device restores the inner one's state (here, autocast off) and still raises."""
    stacked = FUNCTION.replace(
        "    def forward",
        '    @torch.amp.custom_fwd(device_type="cpu")\n    @torch.amp.custom_fwd(device_type="xpu")\n    def forward',
    ).replace(
        "    def backward",
        '    @torch.amp.custom_bwd(device_type="cpu")\n    @torch.amp.custom_bwd(device_type="xpu")\n    def backward',
    )
    with pytest.raises(RuntimeError, match="same dtype"):
        _backward_under_cpu_autocast(stacked)


PADDING = """\
import torch


def attend(scores, attention_mask):
    mask = attention_mask[:, None, :, :].to(scores.dtype)
    mask = (1.0 - mask) * torch.finfo(torch.float32).min
    return torch.softmax(scores + mask, dim=-1)
"""


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_padding_mask_fix_keeps_fully_masked_rows_finite(dtype: torch.dtype) -> None:
    """A padded query row masks every key: unfixed, `finfo(float32).min` is -inf in half precision
    and the row is NaN; fixed, the row is finite in every dtype and every other row is unchanged."""
    fixed = _fixed(PADDING, "AMP004")
    assert "torch.finfo(mask.dtype).min" in fixed
    padding = torch.ones(2, 8, dtype=torch.bool)
    padding[1, 5:] = False
    pairs = padding[:, :, None] & padding[:, None, :]
    scores = (torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(0)) * 3).to(dtype)
    probs = {}
    for name, code in (("old", PADDING), ("fixed", fixed)):
        namespace: dict[str, object] = {}
        exec(code, namespace)
        probs[name] = namespace["attend"](scores, pairs)  # type: ignore[operator]
    whole = ~pairs.any(-1)[:, None, :].expand(2, 4, 8)  # the query rows with every key masked
    assert whole.any()
    assert torch.isfinite(probs["fixed"]).all()
    assert torch.equal(probs["fixed"][~whole], probs["old"][~whole])
    if dtype != torch.float32:
        assert probs["old"][whole].isnan().all()
    else:
        assert torch.equal(probs["fixed"], probs["old"])
