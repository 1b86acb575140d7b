"""AMP011: eager attention in a float16 model (case 2)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst

from amplint.rule import Rule
from amplint.static.branches import Branches
from amplint.static.context import FileContext, Finding
from amplint.static.engine.interpret import FLOAT16_WORDS
from amplint.static.facts import Float16
from amplint.static.scopes import walk

_ATTN_KEYS = frozenset({"attn_implementation", "_attn_implementation", "_attn_implementation_internal"})
# The text of a file that chooses eager attention: `attn_implementation="eager"`,
# `config._attn_implementation = "eager"`, `{"attn_implementation": "eager"}`,
# `set_attn_implementation("eager")` (a comparison `== "eager"` only reads the setting).
_SETS_EAGER = re.compile(r"""attn_implementation\w*['"]?\]?\s*[:=(]\s*['"]eager['"]""")
_MESSAGE = (
    "eager attention in a float16 model ({setting}): the eager path computes `Q @ K^T` and the "
    "softmax in float16, where long inputs of bf16-trained models exceed 65504 and turn into inf, then "
    'NaN (Qwen2 generating "!!!!"); SDPA and flash-attention scale inside the kernel and do not overflow'
)
_HELP = (
    'use `attn_implementation="sdpa"` (or "flash_attention_2"), or keep eager attention in bfloat16/float32; '
    "not changed automatically because eager is sometimes chosen on purpose (`output_attentions`, "
    "attention hooks, models without SDPA)"
)


class EagerAttentionInFp16(Rule):
    """
    ## What it does
    Flags `attn_implementation="eager"` (a keyword of `from_pretrained`/`from_config`/a config, a
    `config._attn_implementation = "eager"` assignment, `set_attn_implementation("eager")`, or a
    `{"attn_implementation": "eager"}` entry) where the same call or the same function (or script)
    also runs the model in float16: `torch_dtype=torch.float16`, `.half()`, `.to(torch.float16)` or
    float16 autocast.

    ## Why is this bad?
    The eager attention path materialises `Q @ K^T` in the model's dtype. float16's largest finite
    value is 65504; on long inputs, the scores of a model trained in bfloat16 exceed it, become
    `inf`, and the softmax turns them into NaN: Qwen2-7B in float16 with eager attention generates
    endless "!". The fused kernels (SDPA, flash-attention) scale inside the kernel and accumulate in
    float32, so the same model is fine with them.

    ## Example
    ```python
    model = AutoModelForCausalLM.from_pretrained(
        "Qwen/Qwen2-7B-Instruct", attn_implementation="eager", torch_dtype=torch.float16
    )
    ```

    ## Fix
    ```python
    model = AutoModelForCausalLM.from_pretrained(
        "Qwen/Qwen2-7B-Instruct", attn_implementation="sdpa", torch_dtype=torch.float16
    )
    ```
    or keep eager attention and load in bfloat16 (or float32 on GPUs without bfloat16). amplint does
    not switch the implementation itself: code that asks for eager attention often needs it
    (`output_attentions=True`, hooks on attention weights, a model without SDPA support).

    ## References
    - Qwen2-7B-Instruct in float16: eager attention overflows in `Q @ K^T` and emits "!", flash-attn2
      and SDPA do not: https://github.com/QwenLM/Qwen3/issues/910
    - perplexity NaN with eager attention in float16, 7.14 with SDPA:
      https://github.com/huggingface/transformers/pull/33317
    - "eager attention with a float16 model outputs many exclamation marks":
      https://github.com/QwenLM/Qwen2.5-Math/issues/66
    """

    code = "AMP011"
    name = "eager-attention-in-fp16"
    summary = 'attn_implementation="eager" together with float16 (torch_dtype, .half(), float16 autocast)'
    triggers = frozenset({"eager"})
    also_triggers = (FLOAT16_WORDS,)
    trigger_pattern = _SETS_EAGER
    # The float16 setting is looked for where eager attention is chosen: that function, or the module.
    region_words = frozenset()
    region_pattern = _SETS_EAGER

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        tops = {top for top in ctx.module.body if any(_eager(node) is not None for node in walk(top))}
        if not tops:
            return
        module = [
            node
            for statement in ctx.module.body
            if not isinstance(statement, (cst.FunctionDef, cst.ClassDef))
            for node in walk(statement)
        ]
        inside = {id(node) for top in tops for node in walk(top) if isinstance(node, cst.FunctionDef)}
        regions = [module] + [
            list(walk(s.node.body))
            for s in ctx.scopes
            if isinstance(s.node, cst.FunctionDef) and id(s.node) in inside
        ]
        reported: set[cst.CSTNode] = set()
        for nodes in regions:
            eager = [node for node in (_eager(node) for node in nodes) if node is not None]
            eager = [node for node in eager if node not in reported]
            settings = _float16_in(ctx, nodes) if eager else []
            if not settings:
                continue
            branches = Branches(ctx, nodes)
            for node in eager:
                # A float16 load in another arm of an `if` is another model's (sendnn-inference
                # loads its embedding model in float16, its classifier in the checkpoint's dtype).
                float16 = next((f for f in settings if not branches.apart(f.node, node)), None)
                if float16 is not None:
                    reported.add(node)
                    yield _finding(ctx, node, float16)


def _is_eager(node: cst.BaseExpression) -> bool:
    return _string(node) == "eager"


def _eager(node: cst.CSTNode) -> cst.BaseExpression | None:
    """The `"eager"` string by which `node` chooses eager attention, or None."""
    if isinstance(node, cst.Call):
        for arg in node.args:
            if arg.keyword is not None and arg.keyword.value in _ATTN_KEYS and _is_eager(arg.value):
                return arg.value
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "set_attn_implementation" and node.args:
            value = node.args[0].value
            return value if _is_eager(value) else None
    elif isinstance(node, cst.Assign) and _is_eager(node.value):
        # `config._attn_implementation = "eager"`, `kwargs["attn_implementation"] = "eager"`
        for target in node.targets:
            assigned = target.target
            index = (
                assigned.slice[0].slice if isinstance(assigned, cst.Subscript) and assigned.slice else None
            )
            named: str | None = assigned.attr.value if isinstance(assigned, cst.Attribute) else None
            if isinstance(index, cst.Index):
                named = _string(index.value)
            if named in _ATTN_KEYS:
                return node.value
    elif isinstance(node, cst.DictElement) and _is_eager(node.value) and _string(node.key) in _ATTN_KEYS:
        return node.value
    return None


def _string(node: cst.BaseExpression) -> str | None:
    value = node.evaluated_value if isinstance(node, cst.SimpleString) else None
    return value if isinstance(value, str) else None


def _float16_in(ctx: FileContext, nodes: list[cst.CSTNode]) -> list[Float16]:
    """How the region surely runs a model in float16 (not one branch of a choice made at run time):
    a cast, a loader's dtype, the dtype entry of a keyword dict, or float16 autocast."""
    settings = (ctx.facts.float16_setting(node) for node in nodes)
    return [found for found in settings if found is not None and found.surely]


def _finding(ctx: FileContext, node: cst.BaseExpression, float16: Float16) -> Finding:
    line = ctx.facts.line(float16.node)
    apart = node not in set(walk(float16.node)) and line != ctx.facts.line(node)
    setting = f"`{float16.spelled}`" + (f" at line {line}" if apart else "")
    why = ctx.facts.describe(float16.why, float16.node)
    message = _MESSAGE.format(setting=setting) + (f"; float16 here: {why}" if why else "")
    return Finding(node, message, help=_HELP, evidence=float16.why)
