"""AMP020: distributed mixed precision that reduces gradients, or keeps buffers, in half precision."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from amplint.rule import Rule
from amplint.static.context import FileContext, Finding
from amplint.static.facts import Fact
from amplint.static.patterns import argument
from amplint.static.scopes import walk

_FSDP1 = frozenset(
    f"torch.distributed.fsdp{module}.MixedPrecision"
    for module in ("", ".api", ".fully_sharded_data_parallel")
)
_FSDP2 = frozenset(
    f"torch.distributed{module}.MixedPrecisionPolicy"
    for module in (".fsdp", "._composable.fsdp", ".fsdp._fully_shard", ".fsdp._fully_shard._fsdp_api")
)
# DeepSpeed's configuration key for the dtype of gradient all-reduce and reduce-scatter.
_DEEPSPEED_KEY = "communication_data_type"
_REDUCE = "gradients are summed across ranks in {names}{how}: {why}"
_DEFAULT = ", because `reduce_dtype` is not set and FSDP then reduces in `param_dtype`"
_WHY = {
    "bf16": "bfloat16 keeps 8 significant bits, so each partial sum rounds away what is below 1/256 of it",
    "fp16": "float16 keeps 11 significant bits and overflows past 65504",
}
_BUFFERS = (
    "`buffer_dtype` casts the model's buffers (rotary `inv_freq`, running statistics of norms other than "
    "BatchNorm) to {names} and keeps them there, so they lose their low bits for the whole run"
)
_HELP_REDUCE = "pass `reduce_dtype=torch.float32`: gradients are reduced in float32 and the compute stays in `param_dtype`"
_HELP_BUFFERS = "leave `buffer_dtype` unset (buffers keep their dtype) or set it to `torch.float32`"
_HELP_DEEPSPEED = 'set `"communication_data_type": "fp32"`, or leave it out'


class HalfPrecisionGradientReduction(Rule):
    """
    ## What it does
    Flags distributed mixed-precision settings that the dtype-facts engine says name a half dtype
    (written out, or held by a variable assigned one):
    - FSDP's `MixedPrecision(reduce_dtype=torch.bfloat16)` and FSDP2's
      `MixedPrecisionPolicy(reduce_dtype=...)` in bfloat16 or float16;
    - either with a half `param_dtype` and no `reduce_dtype`, which FSDP then reduces in;
    - FSDP's `MixedPrecision(buffer_dtype=...)` in a half dtype;
    - a DeepSpeed configuration written as a Python dict with `"communication_data_type": "bf16"`
      (or `"fp16"`). JSON configuration files are not read.
    A dtype chosen at run time from outside the file (a parameter, a configuration lookup) is not
    flagged, nor is a policy that a test function (`def test_...`) builds.

    Off by default (opt-in) after review 25: on public projects it was not written against it was
    read 23 times on first contact (docs/measured.md): 2 real, 7 worth a look. Most were policies
    on paths the project does not take, a reduction in the dtype its gradients already have, or
    buffers a half dtype holds exactly. Turn it on with `--extend-select AMP020` or `extend-select = ["AMP020"]`
    under `[tool.amplint]`.

    ## Why is this bad?
    Data-parallel training sums every gradient over all ranks. In bfloat16 each partial sum keeps 8
    bits of mantissa, so contributions smaller than 1/256 of the running total vanish, and the error
    grows with the number of ranks; float16 also overflows past 65504. The compute can run in half
    precision while the reduction runs in float32 (`reduce_dtype=torch.float32`): torchtitan and
    Composer's default FSDP setting do exactly that. A half `buffer_dtype` rounds buffers such as
    rotary `inv_freq` for the whole run, which shifts the angles of far positions.

    ## Example
    ```python
    mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
    ```

    ## Fix
    ```python
    mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    ```
    A reduction in bfloat16 halves the bytes sent and is sometimes chosen on purpose for speed
    (Composer's `PURE` mode); the float32 reduction costs more communication, so amplint leaves the
    choice to you and makes no edit.

    ## References
    - `torch.distributed.fsdp.MixedPrecision` and `MixedPrecisionPolicy` (the `reduce_dtype`
      defaults): https://pytorch.org/docs/stable/fsdp.html
    - torchtitan keeps `mixed_precision_reduce = "float32"` by default:
      https://github.com/pytorch/torchtitan/pull/1028; OLMo added float32 reduction:
      https://github.com/allenai/OLMo/pull/280
    """

    code = "AMP020"
    name = "half-precision-gradient-reduction"
    default_on = False
    summary = "FSDP reduce_dtype/buffer_dtype or DeepSpeed communication_data_type in bfloat16 or float16"
    training_run = True
    triggers = frozenset({"MixedPrecision", "MixedPrecisionPolicy", _DEEPSPEED_KEY})
    # Every body of a file that mentions them: the policy class is often imported under another
    # name (`MixedPrecision as TorchMixedPrecision`), and a dtype may be bound far from the call.
    region_words = None

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for call in ctx.index.calls:
            qualified = ctx.qualified(call.func)
            if (qualified in _FSDP1 or qualified in _FSDP2) and not _in_test(ctx, call):
                yield from _policy(ctx, call, fsdp1=qualified in _FSDP1)
        if _DEEPSPEED_KEY in ctx.words:
            yield from _deepspeed(ctx)


def _in_test(ctx: FileContext, call: cst.Call) -> bool:
    """A policy a test function builds configures that test, not a training run."""
    function = ctx.function_of(call)
    return function is not None and function.name.value.startswith("test")


def _half(ctx: FileContext, expr: cst.BaseExpression | None) -> Fact | None:
    """The fact of a dtype argument that may name a half dtype; None for any other."""
    if expr is None:
        return None
    fact = ctx.facts.dtype_value(expr)
    return fact if fact.half_names() else None


def _policy(ctx: FileContext, call: cst.Call, *, fsdp1: bool) -> Iterator[Finding]:
    reduce = argument(call, 1, "reduce_dtype")
    if isinstance(reduce, cst.Name) and reduce.value == "None":
        reduce = None
    param = argument(call, 0, "param_dtype")
    unseen = any(arg.star for arg in call.args)  # `**kwargs` may set what is not written
    if reduce is not None and (fact := _half(ctx, reduce)) is not None:
        yield _reduce(ctx, reduce, fact, "", _HELP_REDUCE)
    elif reduce is None and not unseen and param is not None and (fact := _half(ctx, param)) is not None:
        yield _reduce(ctx, param, fact, _DEFAULT, _HELP_REDUCE)
    buffers = argument(call, 2, "buffer_dtype") if fsdp1 else None
    if buffers is not None and (fact := _half(ctx, buffers)) is not None:
        message = _BUFFERS.format(names=fact.half_names()) + _evidence(ctx, fact, buffers)
        yield Finding(buffers, message, help=_HELP_BUFFERS, evidence=fact.why)


def _deepspeed(ctx: FileContext) -> Iterator[Finding]:
    """`{"communication_data_type": "bf16"}` in a DeepSpeed configuration written as a dict literal."""
    for node in walk(ctx.module):
        key = node.key if isinstance(node, cst.DictElement) else None
        if (
            isinstance(node, cst.DictElement)
            and isinstance(key, cst.SimpleString)
            and key.evaluated_value == _DEEPSPEED_KEY
        ):
            fact = _half(ctx, node.value)
            if fact is not None:
                yield _reduce(ctx, node.value, fact, " by DeepSpeed", _HELP_DEEPSPEED)


def _reduce(ctx: FileContext, node: cst.BaseExpression, fact: Fact, how: str, help: str) -> Finding:
    names = fact.half_names()
    why = "; ".join(_WHY[name] for name in names.split("/"))
    message = _REDUCE.format(names=names, how=how, why=why) + _evidence(ctx, fact, node)
    return Finding(node, message, help=help, evidence=fact.why)


def _evidence(ctx: FileContext, fact: Fact, shown: cst.CSTNode) -> str:
    """Where the dtype comes from, when it is not written in the flagged argument itself."""
    described = ctx.facts.describe(fact.why, shown)
    return f"; {fact.names()} here: {described}" if described else ""
