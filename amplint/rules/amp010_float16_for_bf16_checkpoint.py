"""AMP010: a pretrained checkpoint loaded or cast to float16 (case 3)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst

from amplint.rule import Rule
from amplint.static.context import FileContext, Finding
from amplint.static.facts import Float16
from amplint.static.imports import dotted_name
from amplint.static.patterns import argument
from amplint.static.scopes import walk

_LOADERS = frozenset({"from_pretrained", "from_single_file"})
_PIPELINES = frozenset({"transformers.pipeline"})
# Causal language models: today they are trained in bfloat16 almost without exception.
_CAUSAL_LM_CLASS = re.compile(r"(ForCausalLM|LMHeadModel)$")
# Checkpoint ids of families trained in bfloat16 (on TPUs or recent GPUs), whatever the class.
_BF16_FAMILY = re.compile(
    r"qwen|llama|mistral|mixtral|gemma|phi-?[34]|deepseek|falcon|internlm|glm|baichuan|\byi-|olmo|"
    r"smollm|granite|command-r|t5|ul2|flux|stable-diffusion-3|sd3|hunyuan|cogvideo|wan-?2",
    re.IGNORECASE,
)
# Checkpoint ids of families trained in float32/float16, where float16 is the usual dtype.
_FP16_FAMILY = re.compile(
    r"gpt2|opt-|pythia|gpt-neo|gpt-j|bert|bart|whisper|clip|e5-|stable-diffusion-v1|stable-diffusion-2|"
    r"sd-vae|sdxl|stable-diffusion-xl|florence-2|fp16",
    re.IGNORECASE,
)
_GENERATION_TASKS = frozenset({"text-generation", "text2text-generation", "image-text-to-text"})
# Classes that are loaded with `from_pretrained` but hold no weights to run.
_NOT_A_MODEL = re.compile(r"(Tokenizer|TokenizerFast|Processor|FeatureExtractor|Scheduler|Config)$")
_DTYPE_KEYWORDS = ("torch_dtype", "dtype")
# A model used only through these is converted or published, never run: no activations to overflow.
_CONVERSION = frozenset({"save_pretrained", "push_to_hub", "state_dict", "named_parameters", "parameters"})
# A checkpoint published with float16 weights is meant to run in float16.
_FLOAT16_VARIANT = frozenset({"fp16", "float16"})
_MESSAGE = (
    "{what}: float16 tops out at 65504 with 5 exponent bits, and checkpoints trained in bfloat16 (most "
    "current LLMs and diffusion transformers) can produce activations beyond that, which turn into inf/NaN "
    "(Qwen2 run in fp16 on a V100)"
)
_HELP = (
    "load in `torch.bfloat16` where the GPU supports it (Ampere or newer), else in `torch.float32`; "
    "amplint does not change this itself because bfloat16 needs hardware support"
)


class Float16ForBf16Checkpoint(Rule):
    """
    ## What it does
    Flags a pretrained checkpoint loaded in float16 (`from_pretrained(..., torch_dtype=torch.float16)`,
    `dtype=torch.float16`, the string `"float16"`, the same in `transformers.pipeline(...)` or in a
    `**kwargs` dict built next to the call) and a loaded model cast to float16 afterwards (`.half()`,
    `.to(torch.float16)`), when the checkpoint is most likely trained in bfloat16: a causal language
    model (`*ForCausalLM`, a text-generation pipeline) or a checkpoint id of a bfloat16 family (Qwen,
    Llama, Mistral, Gemma, DeepSeek, T5, Flux, SD3, ...). Stable Diffusion 1/2/XL, BERT-style encoders,
    Whisper and CLIP, which run in float16 as a matter of course, tokenizers, a conditional choice
    (`torch.float16 if fp16 else torch.float32`), a checkpoint published with float16 weights
    (`variant="fp16"`) and a model a function only converts (loads, merges, saves with
    `save_pretrained`, never runs nor hands on) are left alone.

    Off by default (opt-in) after review 14: on public projects it was not written against it was
    read 21 times (precision reviews 4 to 14, docs/measured.md) and none was real: most loaded
    checkpoints published and run in float16 (Llama 2, Vicuna, ChatGLM, BLOOM) or only converted or
    described the model. Turn it on with `--extend-select AMP010` or `extend-select = ["AMP010"]`
    under `[tool.amplint]`.

    ## Why is this bad?
    bfloat16 has float32's 8 exponent bits; float16 has 5, and its largest finite value is 65504.
    Weights and activations of a model trained in bfloat16 can exceed that range: outliers in the
    residual stream or in `Q @ K^T` become `inf`, then NaN, and the model generates garbage ("!!!!")
    or crashes at sampling. Older GPUs without bfloat16 (V100, T4) tempt users into float16.

    ## Example
    ```python
    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2-7B", torch_dtype=torch.float16)
    ```

    ## Fix
    Keep bfloat16 where the hardware allows it, otherwise use float32:
    ```python
    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2-7B", torch_dtype=torch.bfloat16)
    ```
    amplint offers no automatic fix: replacing float16 by bfloat16 trades a numerics problem for a
    hardware requirement (bfloat16 is emulated or unsupported before Ampere), which only the user can
    choose. If float16 must stay, monitor for inf/NaN and prefer fused attention (see AMP011).

    ## References
    - Qwen2-7B-Instruct in float16 on a V100 overflows to NaN ("the original model was trained using
      bfloat16"): https://github.com/QwenLM/Qwen3/issues/868
    - Qwen2-VL in float16 generates only "!": https://github.com/huggingface/transformers/issues/33294
    - DeepSeek-V2 loaded with `torch_dtype=torch.float16` gives NaN activations:
      https://github.com/deepseek-ai/DeepSeek-V2/issues/93
    """

    code = "AMP010"
    name = "float16-for-bf16-checkpoint"
    default_on = False
    summary = "a pretrained checkpoint loaded with torch_dtype=torch.float16 or cast with .half()"
    triggers = frozenset({"float16", "half", "fp16"})
    # The loader call; its dtype, `**kwargs` and later `.half()` are judged beside it.
    region_words = frozenset({*_LOADERS, "pipeline"})

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        # Every float16 dtype is spelled with one of these words (`torch.float16`, `"fp16"`, `.half()`).
        if not ctx.words & self.triggers:
            return
        loaders = [call for call in ctx.index.calls if _loader(ctx, call)]
        if not loaders:
            return
        module_nodes, *functions = _regions(ctx, {ctx.index.top_of[call] for call in loaders})
        module_bindings = _bindings(module_nodes)
        yield from _check_nodes(ctx, module_nodes, module_bindings)
        for nodes in functions:
            yield from _check_nodes(ctx, nodes, {**module_bindings, **_bindings(nodes)})


def _regions(ctx: FileContext, tops: set[cst.BaseStatement]) -> list[list[cst.CSTNode]]:
    """The nodes of the module outside functions and classes, then of each function (nested
    functions included) in the top-level statements `tops`."""
    module = [
        node
        for statement in ctx.module.body
        if not isinstance(statement, (cst.FunctionDef, cst.ClassDef))
        for node in walk(statement)
    ]
    inside = {id(node) for top in tops for node in walk(top) if isinstance(node, cst.FunctionDef)}
    functions = [
        list(walk(s.node.body))
        for s in ctx.scopes
        if isinstance(s.node, cst.FunctionDef) and id(s.node) in inside
    ]
    return [module, *functions]


def _loader(ctx: FileContext, node: cst.CSTNode) -> bool:
    if not isinstance(node, cst.Call):
        return False
    func = node.func
    return (isinstance(func, cst.Attribute) and func.attr.value in _LOADERS) or ctx.qualified(
        func
    ) in _PIPELINES


def _checkpoint_id(ctx: FileContext, call: cst.Call, bindings: dict[str, list[cst.BaseExpression]]) -> str:
    """The checkpoint id a loader names (first argument or `model=`), when it is a string literal,
    or a name bound to one or whose parameter defaults to one; else the empty string."""
    value = next((arg.value for arg in call.args if arg.keyword is None and not arg.star), None)
    if ctx.qualified(call.func) in _PIPELINES:
        value = argument(call, 1, "model")
    function = ctx.function_of(call)
    for _ in range(2):  # `def main(model_name=MODEL_NAME)`, `MODEL_NAME = "t5-3b"`
        if isinstance(value, cst.Name) and len(bindings.get(value.value, [])) == 1:
            value = bindings[value.value][0]
        elif isinstance(value, cst.Name) and function is not None:
            params = function.params
            name = value.value
            value = next(
                (p.default for p in (*params.params, *params.kwonly_params) if p.name.value == name), None
            )
    if isinstance(value, cst.SimpleString) and isinstance(value.evaluated_value, str):
        return value.evaluated_value
    return ""


def _bf16_model(ctx: FileContext, call: cst.Call, bindings: dict[str, list[cst.BaseExpression]]) -> bool:
    """Whether a loader loads a model that was most likely trained in bfloat16: a causal LM, a
    text-generation pipeline, or a checkpoint id of a bfloat16 family; not a tokenizer, and not a
    checkpoint of a family that runs in float16 as a matter of course (Stable Diffusion 1/2/XL,
    BERT-style encoders, Whisper, CLIP)."""
    checkpoint = _checkpoint_id(ctx, call, bindings)
    if checkpoint and _FP16_FAMILY.search(checkpoint):
        return False
    if checkpoint and _BF16_FAMILY.search(checkpoint):
        return True
    func = call.func
    if ctx.qualified(func) in _PIPELINES:
        task = argument(call, 0, "task")
        return isinstance(task, cst.SimpleString) and task.evaluated_value in _GENERATION_TASKS
    owner = func.value if isinstance(func, cst.Attribute) else None
    name = dotted_name(owner) if owner is not None else None
    if name is None:
        return False
    cls = name.rsplit(".", 1)[-1]
    return not _NOT_A_MODEL.search(cls) and bool(_CAUSAL_LM_CLASS.search(cls))


def _finding(ctx: FileContext, node: cst.CSTNode, what: str, float16: Float16) -> Finding:
    """The finding, with the evidence for float16 where it says more than the code quoted."""
    why = ctx.facts.describe(float16.why, node)
    message = _MESSAGE.format(what=what) + (f"; float16 here: {why}" if why else "")
    return Finding(node, message, help=_HELP, evidence=float16.why)


def _check_nodes(
    ctx: FileContext, nodes: list[cst.CSTNode], bindings: dict[str, list[cst.BaseExpression]]
) -> Iterator[Finding]:
    if not any(_loader(ctx, node) for node in nodes):
        return
    loaded: set[str] = set()  # dotted names bound to a loaded model, in source order
    for node in nodes:
        if isinstance(node, cst.Assign):
            derived = _derives_from_load(ctx, node.value, loaded, bindings)
            for target in node.targets:
                name = dotted_name(target.target)
                if name is not None and derived:
                    loaded.add(name)
                elif name is not None:
                    loaded.discard(name)
        if not isinstance(node, cst.Call):
            continue
        if _loader(ctx, node):
            if _bf16_model(ctx, node, bindings) and not _only_converted(ctx, node, nodes):
                yield from _loader_findings(ctx, node, bindings, nodes)
        elif isinstance(node.func, cst.Attribute) and node.func.attr.value in {"half", "to", "type"}:
            float16 = ctx.facts.float16_setting(node)
            if (
                float16 is not None
                and float16.surely
                and _derives_from_load(ctx, node.func.value, loaded, bindings)
            ):
                yield _finding(
                    ctx, node, f"a pretrained checkpoint cast to float16 with `{float16.spelled}`", float16
                )


def _only_converted(ctx: FileContext, call: cst.Call, nodes: list[cst.CSTNode]) -> bool:
    """The loaded model never runs and never leaves the region: every name it is bound to (itself, or
    what a method or wrapper made of it: `PeftModel.from_pretrained(base, ...)`,
    `merged = model.merge_and_unload()`) is only saved or read for its weights
    (`model.save_pretrained(out)`, `model.state_dict()`). A dtype conversion script: no activations."""
    if ctx.function_of(call) is None:
        return False  # a module's global is there to be imported and run elsewhere
    parent = {id(child): node for node in nodes for child in node.children}
    names: set[str] = set()
    derived: set[int] = set()  # the assigned values that make a new name for the model
    for node in nodes:
        if not isinstance(node, cst.Assign) or not _reaches(ctx, node.value, call, names):
            continue
        if len(node.targets) != 1 or not isinstance(node.targets[0].target, cst.Name):
            return False  # bound to an attribute or unpacked: it may run elsewhere
        names.add(node.targets[0].target.value)
        derived.add(id(node.value))
    if not names:
        return False
    for node in nodes:
        if not isinstance(node, cst.Name) or node.value not in names:
            continue
        above = parent.get(id(node))
        if isinstance(above, cst.AssignTarget):
            continue
        if isinstance(above, cst.Attribute) and above.value is node:
            used = parent.get(id(above))
            if (
                isinstance(used, cst.Call)
                and used.func is above
                and (above.attr.value in _CONVERSION or id(used) in derived)
            ):
                continue
        elif isinstance(above, cst.Arg) and id(parent.get(id(above))) in derived:
            continue
        return False  # called, generated with, passed on, returned: it may run
    return True


def _reaches(ctx: FileContext, value: cst.BaseExpression, call: cst.Call, names: set[str]) -> bool:
    """`value` is the loader call or one of `names`, through method calls and wrapper calls."""
    return any(
        link is call or (isinstance(link, cst.Name) and link.value in names)
        for link in _made_from(ctx, value, attributes=False)
    )


def _made_from(
    ctx: FileContext, node: cst.BaseExpression, *, attributes: bool
) -> Iterator[cst.BaseExpression]:
    """`node`, then what it is made from: the object of a method call, the first positional argument
    of a wrapper call (`get_peft_model(model, config)`) and, with `attributes`, the object of an
    attribute or a subscript."""
    current: cst.BaseExpression | None = node
    for _ in range(16):
        if current is None:
            return
        yield current
        if isinstance(current, cst.Call):
            func = current.func
            if isinstance(func, cst.Attribute) and ctx.qualified(func) is None:
                current = func.value
            else:
                current = next((arg.value for arg in current.args if arg.keyword is None), None)
        elif attributes and isinstance(current, (cst.Attribute, cst.Subscript)):
            current = current.value
        else:
            return


def _bindings(nodes: list[cst.CSTNode]) -> dict[str, list[cst.BaseExpression]]:
    """Every value each plain name is assigned in the region."""
    bound: dict[str, list[cst.BaseExpression]] = {}
    for node in nodes:
        if isinstance(node, cst.Assign):
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    bound.setdefault(target.target.value, []).append(node.value)
    return bound


def _derives_from_load(
    ctx: FileContext,
    node: cst.BaseExpression,
    loaded: set[str],
    bindings: dict[str, list[cst.BaseExpression]],
) -> bool:
    """The value is a loaded bfloat16 model: a loader call, a name bound to one, or a method
    chain, attribute or wrapper call (`get_peft_model(model, config)`) on one."""
    for link in _made_from(ctx, node, attributes=True):
        if _loader(ctx, link):
            assert isinstance(link, cst.Call)
            return _bf16_model(ctx, link, bindings)
        name = dotted_name(link)
        if name is not None and name in loaded:
            return True
    return False


def _loader_findings(
    ctx: FileContext,
    call: cst.Call,
    bindings: dict[str, list[cst.BaseExpression]],
    nodes: list[cst.CSTNode],
) -> Iterator[Finding]:
    """Float16 dtype arguments of a loader call, given directly or through `**kwargs`."""
    keywords: dict[str, cst.BaseExpression] = {}
    for arg in call.args:
        if arg.keyword is not None:
            keywords[arg.keyword.value] = arg.value
        elif arg.star == "**" and isinstance(arg.value, cst.Name):
            for value in bindings.get(arg.value.value, []):
                keywords.update(_dict_items(value))
            keywords.update(_dict_updates(arg.value.value, nodes))
        elif arg.star == "**" and isinstance(arg.value, (cst.Dict, cst.Call)):
            keywords.update(_dict_items(arg.value))
    variant = keywords.get("variant", keywords.get("revision"))
    if isinstance(variant, cst.SimpleString) and variant.evaluated_value in _FLOAT16_VARIANT:
        return
    for keyword in _DTYPE_KEYWORDS:
        dtype = keywords.get(keyword)
        float16 = ctx.facts.float16_dtype(dtype) if dtype is not None else None
        if dtype is not None and float16 is not None and float16.surely:
            yield _finding(ctx, dtype, f"a pretrained checkpoint loaded with `{keyword}=` float16", float16)


def _dict_updates(name: str, nodes: list[cst.CSTNode]) -> dict[str, cst.BaseExpression]:
    """What `name.update(dict(...))`, `name.update(key=...)` and `name["key"] = ...` add to a
    keyword dict in the region."""
    items: dict[str, cst.BaseExpression] = {}
    for node in nodes:
        if (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and node.func.attr.value == "update"
            and isinstance(node.func.value, cst.Name)
            and node.func.value.value == name
        ):
            for arg in node.args:
                if arg.keyword is not None:
                    items[arg.keyword.value] = arg.value
                elif not arg.star:
                    items.update(_dict_items(arg.value))
        elif isinstance(node, cst.Assign):
            for target in node.targets:
                subscript = target.target
                if (
                    isinstance(subscript, cst.Subscript)
                    and isinstance(subscript.value, cst.Name)
                    and subscript.value.value == name
                    and len(subscript.slice) == 1
                    and isinstance(subscript.slice[0].slice, cst.Index)
                ):
                    key = subscript.slice[0].slice.value
                    if isinstance(key, cst.SimpleString) and isinstance(key.evaluated_value, str):
                        items[key.evaluated_value] = node.value
    return items


def _dict_items(node: cst.BaseExpression) -> dict[str, cst.BaseExpression]:
    """The string keys of `dict(a=..., b=...)` or `{"a": ..., "b": ...}`."""
    items: dict[str, cst.BaseExpression] = {}
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "dict":
        for arg in node.args:
            if arg.keyword is not None:
                items[arg.keyword.value] = arg.value
    elif isinstance(node, cst.Dict):
        for element in node.elements:
            if isinstance(element, cst.DictElement) and isinstance(element.key, cst.SimpleString):
                key = element.key.evaluated_value
                if isinstance(key, str):
                    items[key] = element.value
    return items
