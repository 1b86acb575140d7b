"""AMP017: rotary position angles computed in half precision."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import libcst as cst

from amplint.rule import Rule
from amplint.static.context import FileContext, Finding
from amplint.static.facts import Fact, why_half
from amplint.static.flow import Flow, Policy, analyse
from amplint.static.patterns import method_call

# Names of inverse frequencies (`inv_freq`, `self.theta`, `temporal_freqs`, `omega`), not of the
# cos/sin tables or complex rotations made from them (`freqs_cis`, `freqs_cos`); a local `theta` is
# as often an angle (a quaternion's, a spline's) as a frequency.
_FREQUENCIES = re.compile(r"inv_freq|inv_timescales|^(self\.)?(\w+_)?freqs?$|^self\.theta$|^(self\.)?omega$")
# Methods that keep what a value stands for: casts and reshapes (not `cos`, `sin`, `exp`).
_KEEPING = frozenset(
    {"float", "double", "half", "bfloat16", "to", "type", "type_as", "view", "reshape", "unsqueeze", "expand"}
    | {"flatten", "transpose", "permute", "repeat", "contiguous", "detach", "clone"}
)
# Names of positions: `t`, `seq_idx`, `position_ids`, `time_stamps` (frame indices), `index`, `grid_h`;
# not the diffusion or flow times of a sinusoidal timestep embedding (`timesteps`, `times`), which are
# no token positions.
_POSITIONS = re.compile(r"^(t|t_[a-z]|\w*seq\w*|\w*pos\w*|\w*idx\w*|\w*index\w*|time_stamps|grid\w*)$")
# An execution mode that converts a built module (`model.half()`, `model.to(torch.bfloat16)`,
# Lightning's "bf16-true"), where a loader's or constructor's dtype only makes new tensors half.
_OUTER = frozenset({"torch.outer", "torch.ger", "torch.matmul", "torch.einsum"})
_MESSAGE = (
    "rotary angles `{code}` are computed in {names} ({part}): integer positions above 256 are not exact "
    "in bf16 (above 2048 in fp16) and the angles' error grows with the position, so attention at long "
    "context degrades; {why}"
)
# Positions in float32 times half frequencies promote to float32, but each angle keeps its
# frequency's rounding, multiplied by the position.
_FREQUENCIES_PART = "the inverse frequencies are {}"
_MESSAGE_FREQUENCIES = (
    "rotary angles `{code}` are made from {names} inverse frequencies: each is rounded by up to 2^-8 "
    "of its value in bf16 (2^-11 in fp16) and the angles' error grows with the position, so "
    "attention at long context degrades; {why}"
)


class HalfPrecisionRotaryAngles(Rule):
    """
    ## What it does
    Flags the product of positions and inverse frequencies that makes rotary (and sinusoidal)
    position angles (`torch.outer(t, inv_freq)`, `t[:, None] * inv_freq`, `einsum("i,j->ij", t,
    inv_freq)`, `inv_freq_expanded @ position_ids_expanded`) when, as the dtype-facts engine sees
    them, the inverse frequencies may be bfloat16 or float16 (a buffer or parameter follows the
    model's dtype: `model.to(torch.bfloat16)` and `.half()` convert buffers too, `persistent=False`
    ones included), the positions were made half in the same function (`arange(n,
    dtype=inv_freq.dtype)`, `.type_as(inv_freq)`, `.to(x.dtype)`, even if upcast later), or the
    product itself runs in a half dtype (a matmul or einsum under autocast). Not flagged: upcasting
    at use (`inv_freq.float()`, `position_ids.float()`) before an elementwise product or under
    `autocast(enabled=False)`; a cache built while the module is constructed, before any
    conversion (torchtune's `rope_init`); a module that overrides `_apply` to keep its frequencies in
    float32 (timm); frequencies the class makes in float32 on purpose (`.float()`,
    `dtype=torch.float32`) where the execution modes that reach it only load or build the model in
    a half dtype (`torch_dtype=`, `set_default_dtype`), which leaves such tensors in float32, and none
    converts the built module (`.half()`, `.to(dtype)`); positions passed in by the caller
    (integers, more often than not); the diffusion or flow times of a timestep embedding; a product
    of tensors made on the CPU (`arange` without `device=`, moved to the GPU after), which CUDA
    autocast does not reach.

    Off by default (opt-in) after review 30: on public projects it was not written against it was
    read 21 times on first contact (docs/measured.md): 2 real, 4 worth a look. Most were angles in
    code no configuration of the project builds, frequencies the project keeps in float32 on
    purpose, or a solver's step taken for a frequency. Turn it on with `--extend-select AMP017` or
    `extend-select = ["AMP017"]` under `[tool.amplint]`.

    ## Why is this bad?
    bfloat16 has 8 significant bits: integers above 256 are rounded (257 becomes 256), float16 loses
    them above 2048, so tokens far apart get the same position. The inverse frequencies themselves
    are rounded by up to 2^-8 of their value, and an angle `position * inv_freq` inherits that error
    times the position: at position 2000 the fastest channel is off by a radian or more. The model
    sees scrambled relative positions at long context and its quality drops without an error.

    ## Example
    ```python
    t = torch.arange(seq_len, device=x.device, dtype=self.inv_freq.dtype)
    freqs = torch.outer(t, self.inv_freq)
    ```

    ## Fix
    Compute positions and angles in float32, and cast only the cos/sin tables to the model's dtype:
    ```python
    t = torch.arange(seq_len, device=x.device, dtype=torch.float32)
    freqs = torch.outer(t, self.inv_freq.float())
    cos, sin = freqs.cos().to(x.dtype), freqs.sin().to(x.dtype)
    ```
    amplint offers no automatic fix: where the angles' dtype reaches the cos/sin tables differs from
    one model to the next.

    ## References
    - RotaryEmbedding wrong in fp16 and bf16: https://github.com/EleutherAI/gpt-neox/issues/1003
    - LlamaRotaryEmbedding's cache wrong after casting the model to float16/bfloat16:
      https://github.com/huggingface/transformers/issues/25681
    - RoPE loses precision under bfloat16 autocast: https://github.com/huggingface/transformers/pull/29285
    - inv_freq converted by `model.to(torch.bfloat16)`: https://github.com/NVIDIA/Megatron-LM/issues/744
    """

    code = "AMP017"
    name = "half-precision-rotary-angles"
    default_on = False
    summary = "rotary position angles (positions times inverse frequencies) computed in bf16/fp16"
    rests_on_half = True
    triggers = frozenset({"inv_freq", "inv_freqs", "theta", "freq", "freqs", "inv_timescales", "omega"})
    region_words = triggers

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        flows: dict[cst.CSTNode, Flow] = {}
        for node in ctx.index.top_of:
            operands = _angle_operands(ctx, node)
            if operands is None:
                continue
            frequencies, positions = operands
            scope = ctx.function_of(node) or ctx.module
            if scope not in flows:
                flows[scope] = analyse(next(s for s in ctx.scopes if s.node is scope), Policy(seed=_nothing))
            if _scalar(ctx, frequencies, flows[scope], depth=4):
                continue  # a number named `omega` (a solver's step), not a table of frequencies
            cast = _half_cast(ctx, positions, flows[scope])
            parts = [
                ("the positions are {}", ctx.facts.of(cast) if cast is not None else None),
                (_FREQUENCIES_PART, ctx.facts.of(frequencies)),
                ("the product runs in {}", ctx.facts.of(node)),
            ]
            half = [(part, fact) for part, fact in parts if fact is not None and _half_here(fact)]
            if half:
                yield _finding(ctx, node, *half[0])


def _angle_operands(
    ctx: FileContext, node: cst.CSTNode
) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """(inverse frequencies, positions) of a product that makes rotary angles, or None."""
    pair: list[cst.BaseExpression] = []
    if isinstance(node, cst.BinaryOperation) and isinstance(
        node.operator, (cst.Multiply, cst.MatrixMultiply)
    ):
        pair = [node.left, node.right]
    elif isinstance(node, cst.Call):
        positional = [arg.value for arg in node.args if arg.keyword is None and not arg.star]
        if ctx.qualified(node.func) in _OUTER:
            pair = positional[1:] if ctx.qualified(node.func) == "torch.einsum" else positional
        elif method_call(ctx, node, frozenset({"outer", "ger"})) is not None and isinstance(
            node.func, cst.Attribute
        ):
            pair = [node.func.value, *positional]
    if len(pair) != 2:
        return None
    first, second = pair
    names = (_root(ctx, first), _root(ctx, second))
    for (frequencies, freq_name), (positions, pos_name) in (
        ((first, names[0]), (second, names[1])),
        ((second, names[1]), (first, names[0])),
    ):
        pos_name = pos_name.removeprefix("self.")
        if (
            _FREQUENCIES.search(freq_name)
            and _POSITIONS.match(pos_name)
            and not _FREQUENCIES.search(pos_name)
        ):
            return frequencies, positions
    return None


def _root(ctx: FileContext, node: cst.BaseExpression) -> str:
    """The name a value is spelled from, through casts, reshapes and slices: `self.inv_freq` for
    `self.inv_freq[None, :].float()`, `t` for `t.unsqueeze(-1)`, `arange_pos` for `torch.arange(n)`,
    `position_ids` for `(position_ids + 1)`; "" for what a value is computed from (`freqs.cos()`,
    `freqs[0]`)."""
    for _ in range(16):
        if isinstance(node, cst.Call):
            qualified = ctx.qualified(node.func)
            if qualified == "torch.arange":
                return "arange_pos"
            if qualified is not None or not isinstance(node.func, cst.Attribute):
                return ""
            if node.func.attr.value not in _KEEPING:
                return ""
            node = node.func.value
        elif isinstance(node, cst.Attribute):
            if isinstance(node.value, cst.Name) and node.value.value == "self":
                return f"self.{node.attr.value}"
            return ""
        elif isinstance(node, cst.Subscript):
            if any(
                isinstance(e.slice, cst.Index) and isinstance(e.slice.value, cst.Integer) for e in node.slice
            ):
                return ""  # `freqs[0]`: one of what `freqs` holds
            node = node.value
        elif isinstance(node, cst.UnaryOperation):
            node = node.expression
        elif isinstance(node, cst.BinaryOperation):
            node = node.left
        elif isinstance(node, cst.Name):
            return node.value
        else:
            return ""
    return ""


def _nothing(node: cst.BaseExpression, flow: Flow) -> bool:
    return False


# Calls that reduce tensors to one number: `torch.dot(t, s)`, `torch.norm(r)`, `x.item()`.
_PRODUCTS = frozenset({"torch.dot", "torch.vdot"})
# Calls that make a tensor of what they are given: one number of one (`torch.tensor(1.0)`), a vector
# of numbers of a list of them (`torch.stack([torch.dot(t, t), torch.dot(t, s)])`).
_WRAPPING = frozenset({"torch.tensor", "torch.as_tensor", "torch.scalar_tensor", "torch.stack"})
_NORMS = frozenset({"torch.norm", "torch.linalg.norm", "torch.linalg.vector_norm"})
_REDUCING_METHODS = frozenset({"dot", "vdot", "item", "norm"})


def _scalar(ctx: FileContext, node: cst.BaseExpression, flow: Flow, depth: int) -> bool:
    """Whether the value is a single number: a literal, a reduction of tensors to one (`torch.dot`,
    a norm without a `dim`), a tensor of one (`torch.tensor(1.0)`), the `.real` of one, an element
    of a vector of such (`loc[1]` of `loc = torch.stack([torch.dot(t, t), torch.dot(t, s)])`),
    arithmetic on these, or a name every binding of which in this function is one (BiCGSTAB's
    `omega = torch.dot(t, s) / t_norm2`, or `0.0`)."""
    if isinstance(node, (cst.Integer, cst.Float)):
        return True
    if isinstance(node, cst.UnaryOperation):
        return _scalar(ctx, node.expression, flow, depth)
    if isinstance(node, cst.BinaryOperation):
        return _scalar(ctx, node.left, flow, depth) and _scalar(ctx, node.right, flow, depth)
    if isinstance(node, cst.Attribute) and node.attr.value in ("real", "imag"):
        return _scalar(ctx, node.value, flow, depth)
    if isinstance(node, cst.Subscript):
        index = node.slice[0].slice if len(node.slice) == 1 else None
        integer = isinstance(index, cst.Index) and isinstance(index.value, cst.Integer)
        return integer and _numbers(ctx, node.value, flow, depth)
    if isinstance(node, cst.Call):
        positional = sum(arg.keyword is None for arg in node.args)
        whole = not any(arg.keyword is not None and arg.keyword.value == "dim" for arg in node.args)
        qualified = ctx.qualified(node.func)
        if qualified in _PRODUCTS:
            return True
        if qualified in _WRAPPING:
            return (
                bool(node.args)
                and node.args[0].keyword is None
                and _scalar(ctx, node.args[0].value, flow, depth)
            )
        if qualified in _NORMS:
            return whole and positional <= 2  # `torch.norm(x, p)`; a third is the dim
        reduced = method_call(ctx, node, _REDUCING_METHODS) is not None
        method = node.func.attr.value if reduced and isinstance(node.func, cst.Attribute) else None
        return method in ("dot", "vdot", "item") or (method == "norm" and whole and positional <= 1)
    return _every_binding(ctx, node, flow, depth, _scalar)


def _numbers(ctx: FileContext, node: cst.BaseExpression, flow: Flow, depth: int) -> bool:
    """Whether the value is a list of single numbers, or a tensor made of one (`torch.stack([...])`)."""
    if isinstance(node, cst.Call) and ctx.qualified(node.func) in _WRAPPING and node.args:
        node = node.args[0].value
    if isinstance(node, (cst.List, cst.Tuple)):
        return bool(node.elements) and all(_scalar(ctx, e.value, flow, depth) for e in node.elements)
    return _every_binding(ctx, node, flow, depth, _numbers)


def _every_binding(
    ctx: FileContext,
    node: cst.BaseExpression,
    flow: Flow,
    depth: int,
    test: Callable[[FileContext, cst.BaseExpression, Flow, int], bool],
) -> bool:
    """Whether `node` is a name every binding of which in this function passes `test`."""
    bound = flow.history.get(node.value, []) if isinstance(node, cst.Name) and depth else []
    return bool(bound) and all(
        isinstance(value, cst.BaseExpression) and test(ctx, value, flow, depth - 1) for value in bound
    )


def _half_cast(ctx: FileContext, positions: cst.BaseExpression, flow: Flow) -> cst.Call | None:
    """The cast that makes the positions half in this function (`arange(n, dtype=inv_freq.dtype)`,
    `.type_as(inv_freq)`, `.to(x.dtype)`), where they come from: positions passed in untouched are
    judged where the caller makes them, as integers more often than not."""
    seen: set[cst.CSTNode] = set()
    stack: list[cst.CSTNode] = [positions]
    while stack and len(seen) < 64:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if isinstance(node, cst.Call) and _casts(node) and _half_here(ctx.facts.of(node)):
            return node
        if isinstance(node, cst.Name):
            stack.extend(flow.history.get(node.value, ()))
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            stack.append(node.func.value)
        elif isinstance(node, cst.Call):
            stack.extend(arg.value for arg in node.args[:1])
        elif isinstance(node, cst.BinaryOperation):
            stack.extend((node.left, node.right))
        elif isinstance(node, (cst.Subscript, cst.UnaryOperation)):
            stack.append(node.value if isinstance(node, cst.Subscript) else node.expression)
    return None


def _casts(call: cst.Call) -> bool:
    """A call that sets a dtype: `.to(...)`, `.type_as(...)`, `.half()`, `dtype=`."""
    method = call.func.attr.value if isinstance(call.func, cst.Attribute) else None
    return method in ("to", "type", "type_as", "half", "bfloat16") or any(
        arg.keyword is not None and arg.keyword.value == "dtype" for arg in call.args
    )


def _half_here(fact: Fact) -> bool:
    """Half, and not only because an input of the function may be: what a caller passes in is
    judged where the caller makes it."""
    return fact.may_be_half and not all(isinstance(step.node, cst.Param) for step in fact.why)


def _finding(ctx: FileContext, node: cst.CSTNode, part: str, fact: Fact) -> Finding:
    code = " ".join(ctx.code(node).split())
    code = code if len(code) <= 60 else code[:57] + "..."
    names = fact.half_names()
    return Finding(
        node,
        (_MESSAGE_FREQUENCIES if part == _FREQUENCIES_PART else _MESSAGE).format(
            code=code, names=names, part=part.format(names), why=why_half(fact)
        ),
        help=(
            "compute the positions and the angles in float32 (`torch.arange(..., dtype=torch.float32)`, "
            "`inv_freq.float()`, with autocast disabled around a matmul or einsum) and cast only the "
            "cos/sin tables to the model's dtype"
        ),
        evidence=fact.why,
        caller_only=fact.caller,
    )
