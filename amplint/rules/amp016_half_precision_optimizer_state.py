"""AMP016: an optimizer stepping half-precision parameters with no float32 master copy."""

from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst

from amplint.rule import Rule
from amplint.static.context import FileContext, Finding
from amplint.static.facts import TENSOR, Fact
from amplint.static.ops import BF16, F16, HALF
from amplint.static.patterns import argument
from amplint.static.scopes import walk

# Optimizer classes by qualified name: torch's, and those of transformers, bitsandbytes, apex,
# DeepSpeed, torchao, timm, lion-pytorch and Transformer Engine. None keeps float32 master weights of
# its own; optimi's do (Kahan summation is on by default for low-precision parameters), so they are
# not listed.
_OPTIMIZER = re.compile(
    r"^(?:torch\.optim(?:\.(?!lr_scheduler\.|swa_utils\.)[a-z_]+)?|transformers(?:\.optimization)?|"
    r"bitsandbytes\.optim(?:\.[a-z_0-9]+)?|apex\.optimizers|deepspeed\.ops\.(?:adam|lamb|lion|adagrad)|"
    r"torchao\.optim|timm\.optim|lion_pytorch|transformer_engine\.pytorch\.optimizers)"
    r"\.(?!Optimizer$)(_?[A-Z]\w*)$"
)
_TRANSFORMERS_OPTIMIZERS = frozenset({"AdamW", "Adafactor"})
# Optimizer options that keep the rounding of half-precision updates in check: a float32 master
# copy (Transformer Engine, apex), Kahan summation (optimi, torchdistx's AnyPrecisionAdamW) or
# stochastic rounding (torchao).
_COMPENSATING_OPTIONS = frozenset(
    {
        "master_weights",
        "master_weight_dtype",
        "use_master_weights",
        "kahan_sum",
        "use_kahan_summation",
        "bf16_stochastic_round",
    }
)
# Words of a file that hands its optimizer to a wrapper keeping float32 master weights (DeepSpeed's
# and apex's float16/bfloat16 optimizers, Megatron's) or keeps master copies itself.
_MASTER_WORDS = frozenset(
    {
        "FP16_Optimizer",
        "BF16_Optimizer",
        "FP16_UnfusedOptimizer",
        "Float16OptimizerWithFloat16Params",
        "MixedPrecisionOptimizer",
        "master_params",
        "master_weights",
        "fp32_params",
    }
)
_WRAPPERS = frozenset({"deepspeed.initialize", "apex.amp.initialize", "intel_extension_for_pytorch.optimize"})
_HALF_WORDS = frozenset({"half", "bfloat16", "float16", "bf16", "fp16", "torch_dtype", "dtype"})
_THRESHOLD = {BF16: "2^-9", F16: "2^-12"}


class HalfPrecisionOptimizerState(Rule):
    """
    ## What it does
    Flags an optimizer (`torch.optim.*`, the optimizers of transformers, bitsandbytes, apex, DeepSpeed,
    torchao, timm) built over the parameters of a model that the same file has converted to bfloat16
    or float16 (`model.to(torch.bfloat16)`, `.half()`, `.bfloat16()`, `from_pretrained(...,
    torch_dtype=torch.bfloat16)`, `nn.Linear(..., dtype=torch.float16)`), with no float32 master copy:
    the dtype-facts engine says what dtype the parameters given to the optimizer have (param groups
    too). Float32 copies handed to the optimizer (`[p.float() for p in ...]`), a model kept in
    float32 under autocast, the float32 adapters of `peft.get_peft_model`, optimizer options that
    compensate the rounding (`kahan_sum`, `bf16_stochastic_round`, `master_weights`) and files that hand
    the optimizer to a wrapper keeping master weights (`deepspeed.initialize`, apex's `amp.initialize`,
    `FP16_Optimizer`) are not flagged.

    Off by default (opt-in) after review 37: on public projects it was not written against it was
    read 20 times on first contact (docs/measured.md): 9 real, 2 worth a look. Most others were
    throughput benchmarks, tests and inference paths that never train, or a mode whose weights the
    training keeps in float32. Turn it on with `--extend-select AMP016` or `extend-select =
    ["AMP016"]` under `[tool.amplint]`.

    ## Why is this bad?
    The optimizer adds `lr * update` to each weight in the weight's own dtype. bfloat16 keeps 8
    significant bits, so once an update is below about 2^-9 of the weight (2^-12 in float16) the sum
    rounds back to the weight: late in training, with a decayed learning rate or on large weights,
    most updates vanish and the loss plateaus without an error. Adam's second moment in float16
    also underflows for gradients below about 2e-4, which makes the step `m / (sqrt(v) + eps)` blow
    up. Mixed-precision training keeps float32 weights for exactly this reason and lowers only the
    computation.

    ## Example
    ```python
    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", torch_dtype=torch.bfloat16)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ```

    ## Fix
    Keep the weights in float32 and lower the computation with autocast:
    ```python
    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", torch_dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(**batch).loss
    ```
    or give the optimizer float32 master copies and copy them back after each step, or use an
    optimizer that compensates the rounding (optimi's Kahan summation, torchao's
    `bf16_stochastic_round=True`). amplint offers no automatic fix: the weights' dtype is a choice of
    memory against accuracy that the whole training script depends on.

    ## References
    - Micikevicius et al., "Mixed Precision Training" (float32 master weights):
      https://arxiv.org/abs/1710.03740
    - Zamirai et al., "Revisiting BFloat16 Training" (updates lost to rounding, Kahan summation and
      stochastic rounding): https://arxiv.org/abs/2010.06192
    - optimi (Kahan summation for pure bfloat16 training): https://github.com/warner-benjamin/optimi
    - transformers, pure bf16 training with `AnyPrecisionAdamW` and Kahan summation:
      https://github.com/huggingface/transformers/pull/21312
    """

    code = "AMP016"
    name = "half-precision-optimizer-state"
    default_on = False
    summary = "optimizer over bf16/fp16 parameters with no float32 master weights"
    training_run = True
    triggers = frozenset(
        {"optim", "optimizers", "AdamW", "Adafactor", "FusedAdam", "DeepSpeedCPUAdam", "Lion"}
    )
    region_words = triggers

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        if not ctx.words & _HALF_WORDS or ctx.words & _MASTER_WORDS:
            return
        if any(ctx.qualified(call.func) in _WRAPPERS for call in ctx.index.calls):
            return
        for call in ctx.index.calls:
            name = _optimizer(ctx, call)
            if name is None or _compensated(call):
                continue
            params = argument(call, 0, "params")
            half = [fact for expr in _parameter_sets(ctx, call, params) if _half(fact := ctx.facts.of(expr))]
            if half:
                yield _finding(ctx, call, name, half[0])


def _optimizer(ctx: FileContext, call: cst.Call) -> str | None:
    """The class name of an optimizer constructor, or None."""
    match = _OPTIMIZER.match(ctx.qualified(call.func) or "")
    if match is None:
        return None
    qualified, name = match.group(0), match.group(1)
    if qualified.startswith("transformers") and name not in _TRANSFORMERS_OPTIMIZERS:
        return None
    return name


def _compensated(call: cst.Call) -> bool:
    """An option that keeps master weights or compensates the rounding, not passed as False/None."""
    return any(
        arg.keyword is not None
        and arg.keyword.value in _COMPENSATING_OPTIONS
        and not (isinstance(arg.value, cst.Name) and arg.value.value in ("False", "None"))
        for arg in call.args
    )


def _parameter_sets(
    ctx: FileContext, call: cst.Call, params: cst.BaseExpression | None
) -> list[cst.BaseExpression]:
    """What an optimizer is given to update: the `"params"` of each param group of a list of dicts
    (written in the call or bound to the name it passes just before), else the argument itself."""
    if params is None:
        return []
    literal = params
    if isinstance(params, cst.Name):
        literal = _bound_before(ctx, call, params.value) or params
    if isinstance(literal, (cst.List, cst.Tuple)) and literal.elements:
        groups = [element.value for element in literal.elements]
        if all(isinstance(group, cst.Dict) for group in groups):
            return [
                element.value
                for group in groups
                if isinstance(group, cst.Dict)
                for element in group.elements
                if isinstance(element, cst.DictElement)
                and isinstance(element.key, cst.SimpleString)
                and element.key.evaluated_value == "params"
            ]
    return [params]


def _bound_before(ctx: FileContext, call: cst.Call, name: str) -> cst.BaseExpression | None:
    """The value of the last `name = ...` before `call` in its function (or module)."""
    line = ctx.position(call).start.line
    found: cst.BaseExpression | None = None
    for node in walk(ctx.function_of(call) or ctx.module):
        if (
            isinstance(node, cst.Assign)
            and any(isinstance(t.target, cst.Name) and t.target.value == name for t in node.targets)
            and ctx.position(node.value).start.line < line
        ):
            found = node.value
    return found


def _half(fact: Fact) -> bool:
    """Parameters this file made half (on some branch), not ones in whatever dtype a caller picks."""
    return fact.kind == TENSOR and bool(fact.dtypes & HALF) and not fact.caller


def _finding(ctx: FileContext, call: cst.Call, name: str, fact: Fact) -> Finding:
    halves = [dtype for dtype in (BF16, F16) if dtype in fact.dtypes]
    threshold = f"{_THRESHOLD[halves[0]]} of the weight"
    if len(halves) == 2:
        threshold = f"{_THRESHOLD[BF16]} of the weight in bf16 ({_THRESHOLD[F16]} in fp16)"
    why = ctx.facts.describe(fact.why, call)
    message = (
        f"`{name}` updates {fact.half_names()} parameters with no float32 master copy: `param + lr * update` "
        f"rounds back to `param` once the update is below about {threshold}, so training "
        f"stalls silently" + (f"; {fact.half_names()} here: {why}" if why else "")
    )
    return Finding(
        call,
        message,
        help=(
            "keep the parameters in float32 and lower the computation with `torch.autocast`, or give the "
            "optimizer float32 master copies, or use an optimizer with Kahan summation or stochastic "
            "rounding (optimi, torchao's `bf16_stochastic_round=True`)"
        ),
        evidence=fact.why,
    )
