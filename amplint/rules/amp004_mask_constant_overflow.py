"""AMP004: attention masks built from hand-written constants (case 4)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from amplint.diagnostics import UNSAFE
from amplint.rule import Rule, Verdict
from amplint.runtime.chains import SOFTMAX, half_precision_verdict
from amplint.static.attention import is_softmax
from amplint.static.constants import BF16_MAX, FP16_OVERFLOW
from amplint.static.context import FileContext, Finding, FixPlan, scopes_holding
from amplint.static.facts import CALLER_CLAUSE, TENSOR, Fact
from amplint.static.flow import Flow, Policy, analyse
from amplint.static.imports import last_name
from amplint.static.ops import F16
from amplint.static.patterns import argument, callee_name, method_call
from amplint.static.scopes import Scope, named_params, walk

if TYPE_CHECKING:
    from amplint.diagnostics import Diagnostic
    from amplint.runtime.graph import DtypeGraph, DtypeNode

# Below float16's largest value, but a score of -16 or less added to it rounds to -inf in float16.
_FP16_EDGE = 60000.0
_MASKED_FILL = frozenset({"masked_fill", "masked_fill_"})
_CASTS = frozenset({"to", "type", "half", "type_as"})
# A mask built from positions (causal, sliding-window, chunked, block-diagonal) keeps the diagonal,
# so no row is ever masked whole; a padding mask can mask a whole row.
_STRUCTURAL = re.compile(
    r"(causal|future|triu|tril|upper|lower|diag|look_?ahead|subsequent|autoregressive|strict|^ltr$|ltor|"
    r"segsum|window|chunk|band)",
    re.IGNORECASE,
)
_PADDING = re.compile(r"(pad|attention_mask|attn_mask|key_mask|valid|length|lens$|token_mask)", re.IGNORECASE)
# A mask made from sequence lengths (`sequence_mask(src_len)`, `lengths_to_mask(lengths)`) masks
# the keys past each length: a whole row only for an empty sequence.
_LENGTHS = re.compile(r"(length|lens$|sequence_mask)", re.IGNORECASE)
_LENGTH_ARGUMENT = re.compile(r"(^|_)(len|lens|lengths?)$", re.IGNORECASE)
# Constructors whose arguments are the mask's size, which says nothing about which entries it masks
# (vllm's `torch.ones((q_end - q_start, kv_end - kv_start)).triu(1)`, its ends read from `cu_seq_lens`).
_SIZED = frozenset({"ones", "zeros", "empty", "full", "new_ones", "new_zeros", "new_empty", "new_full"})
_ONES = frozenset({"ones", "ones_like", "new_ones"})
_TRIANGLES = frozenset({"triu", "tril", "triu_", "tril_"})
_POSITIONS = re.compile(r"(arange|position|^pos|idx|index|^i$|^j$)", re.IGNORECASE)
# A mask computed relative to a row's maximum or top-k keeps at least that entry.
_KEEPS_ONE = frozenset({"max", "amax", "topk", "argmax", "kthvalue", "sort"})
# Words with which a module shows that its masks can cover whole rows (it computes or repairs them).
_FULL_ROW_WORDS = frozenset(
    {"all_masked_rows", "fully_masked", "fully_masked_rows", "_unmask_unattended", "unmask_unattended"}
)
_MASK_NAME = re.compile(r"(mask|pad|bias)", re.IGNORECASE)
# An `if` on these picks the constant per dtype on purpose (xlnet: `65500` for float16, else `1e30`).
_DTYPE_TEST = re.compile(r"(dtype|float16|half|bfloat16|fp16|bf16|is_fp)")
_ATTENTION_KEYWORDS = frozenset({"attn_mask", "attention_mask", "attn_bias", "mask"})
_NAN_ROWS = "a fully masked row of -inf gives NaN in softmax"
_ROWS_KEPT = frozenset({"structural", "key_only", "cleaned"})


# Per name, the slices of it a scope assigns and what it assigns them (`_slice_writes`).
_SliceWrites = Mapping[str, list[tuple[cst.Subscript, cst.BaseExpression]]]


@dataclass(frozen=True)
class _Site:
    """A constant written into a tensor. `kind`: `masked_fill`, `where`, `full` or `product`
    (`(1 - mask) * -1e9`); `tensor` what it is written into (the masked scores, the other value of a
    `where`, the mask multiplied; None for a tensor made from constants only)."""

    node: cst.CSTNode
    kind: str
    value: cst.BaseExpression
    number: float
    tensor: cst.BaseExpression | None
    mask: cst.BaseExpression | None


class MaskConstantOverflow(Rule):
    """
    ## What it does
    Flags attention masks built from hand-written constants that do not survive half precision:
    `masked_fill`, `torch.where`, `torch.full` and additive masks (`(1 - mask) * -1e9`,
    `scores - 1e9 * mask`) with values beyond the float16 range (`-1e9`, `-1e10`, `-1e30`,
    `torch.finfo(torch.float32).min`, written out or held by a constant, a parameter's default or
    `self.mask_value`), float16's own minimum in an additive mask (`-65504`), and `-inf` in a mask
    that can cover a whole row before a softmax. The dtype-facts engine says where the masked tensor
    can be float16 (or bfloat16, for constants beyond its range too); in a project that runs in
    bfloat16 only, the float16 hazards are not reported. Left alone: masks of float32 tensors,
    `torch.finfo(dtype).min`, constants chosen per dtype, `-1e4` and `-10000`, additive masks that
    stay float32, and `-inf` in causal, windowed or top-k masks (they keep every row's diagonal or
    maximum; a buffer the module registers from `torch.tril` too, whatever sizes the mask is built
    with, a causal block written into a slice of it, `mask[..., -n:] = torch.tril(...)`, Megatron's
    left-to-right `ltor_mask`, a padding mask whose diagonal is unmasked last,
    `mask & ~torch.eye(n)`, and a top-p mask cleared at each row's first entry,
    `mask[..., 0] = False`), `-65504` in a bias handed to a kernel as an argument (the kernel adds it
    to its own scores; -65504 itself is finite), in
    key-padding masks (`mask[:, None, None, :]`, masks from lengths such as
    `sequence_mask(lengths)`: a whole row only for an empty input), in a mask the caller passes in (flagged only where the module shows that
    rows can be masked whole), or when the NaN is masked away after the softmax.

    Off by default (opt-in) after review 24: on public projects it was not written against it was
    read 22 times on first contact (docs/measured.md) and 2 were real; most were masks that cannot
    cover a whole row, or scores already float32 where the constant meets them. Turn it on with
    `--extend-select AMP004` or `extend-select = ["AMP004"]` under `[tool.amplint]`. Its hazard
    needs half precision, so it is reported where the project runs the code in bf16/fp16 (an execution mode found in its scripts, tests or configuration, named in
    the message); where nothing in the project does, the finding is conditional and shown only
    with `--show-conditional` (docs/usage.md#execution-modes).

    ## Why is this bad?
    float16's largest finite value is 65504. `scores.masked_fill(mask, -1e9)` on float16 scores
    raises "value cannot be converted to type c10::Half without overflow"; `torch.where`, `torch.full`,
    arithmetic and casts turn the same constant into `-inf` without a word. `torch.finfo(torch.float32).min`
    overflows bfloat16 as well (its largest value is 3.39e38, float32's 3.40e38). A row whose every
    entry is `-inf` has no finite maximum, and softmax returns NaN for it: the finite constant the
    author chose to keep fully masked rows finite (padded query rows, left padding under a causal
    mask) is gone, and the NaN spreads through the next layer's values. A `-inf` padding mask does
    the same in every dtype. Adding `-65504` fits, but adding it to a score of -16 or less rounds to
    `-inf` in float16.

    ## Example
    ```python
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
    scores = scores.masked_fill(attention_mask == 0, -1e9)
    probs = scores.softmax(dim=-1)
    ```

    ## Fix
    Keep the constant where the scores' dtype holds it, and use that dtype's most negative value
    where it does not:
    ```python
    scores = scores.masked_fill(attention_mask == 0, max(-1e9, torch.finfo(scores.dtype).min))
    ```
    In float16 that is -65504; in bfloat16, float32 and float64 the mask is the one written, so a
    float64 model whose softmax takes the scores in float32 still gets a finite mask (its own
    `finfo.min` would be `-inf` there). A `-inf` constant becomes `torch.finfo(scores.dtype).min`.
    Build additive masks in the dtype they are added in, from `torch.finfo(dtype).min`, as
    transformers does. Where the mask is made floating here (cast to the scores' dtype), the fix
    writes that: `(1.0 - mask) * torch.finfo(torch.float32).min` becomes
    `(1.0 - mask) * max(torch.finfo(torch.float32).min, torch.finfo(mask.dtype).min)`, which stays
    finite in float16 and bfloat16, so a fully masked row softmaxes to finite values; every other
    row computes as before.

    ## References
    - `torch.finfo`: https://pytorch.org/docs/stable/type_info.html
    - transformers' masks: `torch.finfo(dtype).min` instead of `-1e9` / `-10000.0`
    """

    code = "AMP004"
    name = "mask-constant-overflow"
    default_on = False
    fix_applicability = (
        UNSAFE  # `finfo(dtype).min` in an additive mask can overflow where the constant did not
    )
    summary = (
        "attention mask built from -1e9, finfo(float32).min, -65504 or a padding -inf that overflows or NaNs"
    )
    # No triggers: `-65504` has no word of its own. A hazardous constant: `-inf`, `finfo`, a number
    # of five digits or with an exponent, or a name the function binds to one (`masked_fill`). The
    # `__init__` of a kept method's class, where `self.mask_value` is set, stays as well.
    region_words = frozenset({"inf", "Inf", "finfo", "masked_fill", "masked_fill_"})
    region_pattern = re.compile(r"\d{5}|\d\.?[eE]\+?\d")

    @classmethod
    def confirm(cls, diagnostic: Diagnostic, nodes: Sequence[DtypeNode], graph: DtypeGraph) -> Verdict | None:
        # A mask built in float32 is cast to the scores' dtype further on: followed to the softmax.
        return half_precision_verdict(graph, nodes, "the mask is applied in half precision", bites=SOFTMAX)

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        negated = _negated_products(ctx)
        sites: dict[cst.CSTNode, _Site] = {}
        for node in ctx.index.top_of:
            site = _site(ctx, node, node in negated)
            if site is not None and _hazard(site.number) is not None:
                sites[node] = site
        for scope in scopes_holding(ctx, sites) if sites else ():
            yield from _check_scope(ctx, scope, sites)


def _hazard(number: float) -> str | None:
    """How a mask value fares in half precision: "inf", "bf16" (overflows bfloat16 too), "fp16"
    (overflows float16), "edge" (float16's own minimum), or None (fits)."""
    magnitude = abs(number)
    if math.isinf(magnitude):
        return "inf"
    if magnitude > BF16_MAX:
        return "bf16"
    return "fp16" if magnitude >= FP16_OVERFLOW else "edge" if magnitude >= _FP16_EDGE else None


def _negated_products(ctx: FileContext) -> set[cst.CSTNode]:
    """Products subtracted from something (`scores - 1e9 * mask`): their constant masks negatively."""
    negated: set[cst.CSTNode] = set()
    for node in ctx.index.top_of:
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Subtract):
            negated.add(node.right)
        elif isinstance(node, cst.SimpleStatementLine):
            negated.update(
                small.value
                for small in node.body
                if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.SubtractAssign)
            )
    return negated


def _site(ctx: FileContext, node: cst.CSTNode, negated: bool) -> _Site | None:
    number = ctx.facts.number
    if isinstance(node, cst.BinaryOperation):
        if isinstance(node.operator, cst.Multiply):
            for constant, other in ((node.left, node.right), (node.right, node.left)):
                if _mask_like(other) and (found := number(constant)) is not None and number(other) is None:
                    return _Site(node, "product", constant, -found if negated else found, other, other)
        return None
    if not isinstance(node, cst.Call):
        return None
    name, function = callee_name(node), ctx.qualified(node.func)
    if name in _MASKED_FILL:  # `torch.masked_fill(x, mask, value)` or `x.masked_fill(mask, value)`
        first = 1 if function == "torch.masked_fill" else 0
        tensor = argument(node, 0, "input") if first else method_call(ctx, node, _MASKED_FILL)
        values: tuple[cst.BaseExpression | None, ...] = (argument(node, first + 1, "value"),)
    elif name == "where":  # `torch.where(mask, x, value)` or `x.where(mask, value)`
        first = 1 if function == "torch.where" else 0
        receiver = argument(node, 1, "input") if first else method_call(ctx, node, frozenset({"where"}))
        if receiver is None:
            return None  # `np.where`, a method of the file's own
        values = (argument(node, first + 1, "other"), receiver)
    elif function in ("torch.full", "torch.full_like") or name == "new_full":
        first, tensor, values = 0, None, (argument(node, 1, "fill_value"),)
    else:
        return None
    numbers = [number(v) if v is not None else None for v in values]
    for i, (value, found) in enumerate(zip(values, numbers, strict=True)):
        if value is None or found is None or _hazard(found) is None:
            continue
        if name in _MASKED_FILL and tensor is None:
            return None
        if name == "where":
            tensor = values[1 - i] if numbers[1 - i] is None else None
            return _Site(node, "where", value, found, tensor, argument(node, 0, "condition"))
        if name in _MASKED_FILL:
            return _Site(node, "masked_fill", value, found, tensor, argument(node, first, "mask"))
        return _Site(node, "full", value, found, None, None)
    return None


def _mask_like(node: cst.BaseExpression) -> bool:
    """An operand that holds a 0/1 mask: named so, or `1 - x`; not a tensor of ones (agilerl's
    `torch.ones(sz, sz, device=src_mask.device) * float("-inf")` has no 0 to meet the infinity),
    nor a name only in a constructor's size or device."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Subtract):
        return isinstance(node.left, (cst.Integer, cst.Float))
    if isinstance(node, cst.Call) and callee_name(node) in _ONES:
        return False
    return any(
        (isinstance(child, cst.Name) and _MASK_NAME.search(child.value))
        or (isinstance(child, cst.Attribute) and _MASK_NAME.search(child.attr.value))
        for child in _without_sizes(node)
    )


# -- judging ---------------------------------------------------------------------------------


def _check_scope(ctx: FileContext, scope: Scope, sites: Mapping[cst.CSTNode, _Site]) -> Iterator[Finding]:
    """Follow each site's value to a softmax, a cast, or a tensor it is added to in place, and read
    its mask where it stands (names as bound there)."""
    origin: dict[cst.CSTNode, cst.CSTNode] = {}
    armed: dict[str, cst.CSTNode] = {}  # names masked in place with `masked_fill_`
    sliced = _slice_writes(scope.node)
    flags: dict[cst.CSTNode, set[str]] = {}
    parameters = _parameters(scope.node) if isinstance(scope.node, cst.FunctionDef) else None

    def seed(node: cst.BaseExpression, flow: Flow) -> bool:
        site = sites.get(node)
        if site is not None:
            origin[node] = node
            flags[node] = _mask_shape(ctx, site.mask, flow, parameters, sliced)
            if _keeps_diagonal(site, flow) or _keeps_a_column(site, sliced):
                flags[node].add("structural")
            if (
                isinstance(node, cst.Call)
                and callee_name(node) == "masked_fill_"
                and isinstance(site.tensor, cst.Name)
            ):
                armed[site.tensor.value] = node
            return True
        if isinstance(node, cst.Name) and node.value in armed:
            origin[node] = armed[node.value]
            return True
        return False

    def sink(node: cst.BaseExpression, flow: Flow) -> str | None:
        if is_softmax(ctx, node):
            return "softmax"
        if not isinstance(node, cst.Call):
            return None
        if any(arg.keyword is not None and arg.keyword.value in _ATTENTION_KEYWORDS for arg in node.args):
            return "softmax"
        return "cast" if callee_name(node) in _CASTS and ctx.qualified(node.func) is None else None

    def added_in_place(name: str, value: cst.CSTNode) -> bool:
        return isinstance(value, cst.AugAssign) and isinstance(
            value.operator, (cst.AddAssign, cst.SubtractAssign)
        )

    flow = analyse(scope, Policy(seed=seed, sink=sink, name_sink=added_in_place))
    into: dict[cst.CSTNode, list[Fact]] = {}  # the facts of what each value is cast to or added to
    for hit in flow.hits.values():
        written = origin.get(hit.origin)
        if written is not None and hit.label == "softmax":
            flags[written].add("softmax")
        elif written is not None:
            target = hit.sink.target if isinstance(hit.sink, cst.AugAssign) else hit.sink
            into.setdefault(written, []).append(ctx.facts.of(target))
    dispatch = [  # `if` statements that test a dtype
        branch
        for statement in scope.body
        for branch in walk(statement)
        if isinstance(branch, cst.If)
        and any(
            _DTYPE_TEST.search(n.value if isinstance(n, cst.Name) else n.attr.value)
            for n in walk(branch.test)
            if isinstance(n, (cst.Name, cst.Attribute))
        )
    ]
    for node, site in sites.items():
        if node in flags:  # else in another scope
            if _cleaned_up(ctx, scope, site):
                flags[node].add("cleaned")
            if any(any(inner is node for inner in walk(branch)) for branch in dispatch):
                flags[node].add("dispatched")
            if math.isinf(site.number):
                finding = _infinite(ctx, site, flags[node])
            else:
                finding = _finite(ctx, site, flags[node], into.get(node, []))
            if finding is not None:
                yield finding


def _infinite(ctx: FileContext, site: _Site, flags: set[str]) -> Finding | None:
    if site.kind == "product":
        return Finding(
            site.node,
            "multiplying a 0/1 mask by infinity gives NaN wherever the mask is 0 (`0 * inf` is NaN), in "
            "every dtype",
            help="build the mask with `torch.where(mask, 0.0, torch.finfo(dtype).min)` or "
            "`masked_fill` instead of a product",
        )
    if site.number > 0 or site.kind == "full" or "softmax" not in flags or flags & _ROWS_KEPT:
        return None
    if "caller" in flags and not ctx.words & _FULL_ROW_WORDS:
        # Whether the caller's mask covers query rows (padding on both axes, left padding under a
        # causal mask) or keys only cannot be seen here; flag it where the module shows it does.
        return None
    return _with_fix(
        ctx,
        site,
        "a `-inf` padding mask before softmax turns every row it masks whole (a padded query row, left "
        "padding under a causal mask) into NaN, in every dtype",
    )


def _finite(ctx: FileContext, site: _Site, flags: set[str], into: list[Fact]) -> Finding | None:
    hazard = _hazard(site.number)
    if (site.number > 0 and site.kind != "masked_fill") or "dispatched" in flags:
        return None
    both = hazard == "bf16"  # beyond bfloat16's range too
    half = (lambda fact: fact.may_be_half) if both else (lambda fact: fact.may_be_fp16)
    # A float16 hazard cites the float16 mode's evidence.
    cited = (lambda fact: fact) if both else (lambda fact: fact.for_dtype(F16))
    shown = ctx.code(site.value)
    beyond = (
        "beyond the float16 and bfloat16 range (largest finite values 65504 and 3.39e38)"
        if both
        else "beyond the float16 range (largest finite value 65504)"
    )
    if site.kind == "masked_fill" and site.tensor is not None:
        fact = ctx.facts.of(site.tensor)
        if hazard == "edge" or not half(fact):
            return None
        fact = cited(fact)
        return _with_fix(
            ctx,
            site,
            f"`masked_fill` with `{shown}`, {beyond}: on a float16 tensor it raises 'value cannot be "
            f"converted to type c10::Half without overflow'; {_why(fact, both)}",
            fact,
        )
    if flags & {"structural", "cleaned"} or (site.kind == "where" and "key_only" in flags):
        return None  # the -inf it turns into masks no row whole
    if site.kind == "where" and site.tensor is not None:
        fact = ctx.facts.of(site.node)
        if hazard == "edge" or not half(fact):
            return None
        fact = cited(fact)
        message = f"`torch.where` with `{shown}`, {beyond}, gives -inf in float16: {_NAN_ROWS}"
        return _with_fix(ctx, site, f"{message}; {_why(fact, both)}", fact)
    # A mask made from constants: half where it is made (of a mask cast here: an attention mask passed
    # in as such is integer or boolean), or where it is cast or added in place later.
    made = ctx.facts.of(site.node)
    if site.kind == "product" and site.tensor is not None and not _cast_here(ctx.facts.of(site.tensor)):
        made = Fact("tensor")
    found = next((fact for fact in (made, *into) if half(fact)), None)
    if found is None:
        return None
    made_here, found = found is made, cited(found)
    if hazard == "edge" and _handed_over(ctx, site.node):
        return None  # a bias a kernel adds to its own (float32) scores: -65504 itself is finite
    if hazard == "edge":
        message = (
            f"an additive mask of `{shown}` (about float16's minimum) rounds to -inf when a score of -16 or "
            f"less is added to it in float16: {_NAN_ROWS}"
        )
        help = "build the mask from `torch.finfo(dtype).min` and add it in float32, or use a value with headroom such as -1e4"
    else:
        message = (
            f"a mask value of `{shown}`, {beyond}, becomes -inf once the mask is float16 (cast, built in that "
            f"dtype, or added in place to float16 scores): {_NAN_ROWS}"
        )
        help = "build the mask in the dtype it is added in, from `torch.finfo(dtype).min`"
        if made_here:
            fix = _product_fix(ctx, site)
            if fix is not None:
                plan, help = fix
                message = f"{message}; {_why(found, both)}"
                return Finding(
                    site.node, message, fix=plan, help=help, evidence=found.why, caller_only=found.caller
                )
    message = f"{message}; {_why(found, both)}"
    return Finding(site.node, message, help=help, evidence=found.why, caller_only=found.caller)


def _handed_over(ctx: FileContext, node: cst.CSTNode) -> bool:
    """`node` is an argument of a call (atorch's `flash_attn_with_mask_bias(q, k, v, mask=-65504.0 * (1.0
    - ltor_mask))`): what the callee adds it to is its own business."""
    return any(arg.value is node for call in ctx.index.calls for arg in call.args)


def _product_fix(ctx: FileContext, site: _Site) -> tuple[FixPlan, str] | None:
    """`(1.0 - mask) * max(<constant>, torch.finfo(mask.dtype).min)` for `(1.0 - mask) * <constant>`
    (transformers' form): the constant, bounded by the extreme of the mask's own dtype, which this
    code made floating (it is half here), so a fully masked row stays finite once added to scores of
    that dtype. Only for a mask that is a
    name or attribute, alone or subtracted from 1; `max` where the product is subtracted."""
    mask = site.tensor
    if isinstance(mask, cst.BinaryOperation) and isinstance(mask.operator, cst.Subtract):
        mask = mask.right  # `1.0 - mask`: `_mask_like` saw a number on the left
    written = ctx.facts.number(site.value)
    if not isinstance(mask, (cst.Name, cst.Attribute)) or mask.lpar or written is None:
        return None
    if ctx.facts.of(mask).kind != TENSOR or not ctx.facts.of(mask).may_be_half:
        return None
    torch, missing = ctx.torch_name()
    dtype = cst.Attribute(value=mask, attr=cst.Name("dtype"))
    finfo = cst.Call(func=cst.Attribute(value=torch, attr=cst.Name("finfo")), args=[cst.Arg(value=dtype)])
    replacement: cst.BaseExpression = cst.Attribute(
        value=finfo, attr=cst.Name("min" if written < 0 else "max")
    )
    if math.isfinite(written):  # the constant where the dtype holds it (see `_with_fix`)
        constant = site.value.with_changes(lpar=[], rpar=[])
        bound = cst.Name("max" if written < 0 else "min")
        replacement = cst.Call(func=bound, args=[cst.Arg(constant), cst.Arg(replacement)])
    shown = ctx.code(replacement)
    plan = FixPlan(f"Mask with `{shown}`", ((site.value, replacement),), missing)
    return plan, f"build the mask from its own dtype's extreme: `{shown}`"


def _why(fact: Fact, both: bool) -> str:
    """Why the tensor can be half there, in the dtypes the constant overflows."""
    if not fact.caller:
        return fact.explain()
    steps = "; ".join(step.text for step in fact.why)
    return f"{CALLER_CLAUSE} {fact.half_names() if both else 'fp16'}" + (f": {steps}" if steps else "")


def _cast_here(fact: Fact) -> bool:
    """The mask's dtype comes from this code (a cast, an op), not only from being a parameter."""
    return any(not isinstance(step.node, cst.Param) for step in fact.why)


# -- whether a mask can cover a whole row ------------------------------------------------------


def _mask_shape(
    ctx: FileContext,
    mask: cst.BaseExpression | None,
    flow: Flow,
    parameters: frozenset[str] | None,
    sliced: _SliceWrites,
) -> set[str]:
    """What a mask's expression, what its names were bound to, and the buffers it reads were
    registered from (nanoGPT's `self.bias`, a `torch.tril`), show: `structural` (built from
    positions, causal or windowed, or relative to a row's maximum or top-k: every row keeps an
    entry; not if it mentions padding), `key_only` (a padding mask broadcast over keys,
    `mask[:, None, None, :]`, or made from lengths: a whole row only for an all-padding input),
    `caller` (a parameter of the function, compared, negated, indexed or cast, not combined here:
    whether it masks query rows is decided outside)."""
    if mask is None:
        return set()
    parts: list[cst.CSTNode] = []
    frontier: list[cst.BaseExpression] = [mask]
    for _ in range(3):
        bound: list[cst.BaseExpression] = []
        for expression in frontier:
            for node in _without_sizes(expression):
                parts.append(node)
                if isinstance(node, cst.Name):
                    history = flow.history.get(node.value, [])[-3:]
                    bound += [b for b in history if isinstance(b, cst.BaseExpression) and b is not mask]
                    bound += [value for _, value in sliced.get(node.value, [])]
        frontier = bound
    parts += [
        node
        for part in parts
        if isinstance(part, cst.Attribute) and isinstance(part.value, cst.Name) and part.value.value == "self"
        for node in walk(_registered(ctx, part.attr.value) or cst.Name("_"))
    ]
    words = [
        n.value if isinstance(n, cst.Name) else n.attr.value
        for n in parts
        if isinstance(n, (cst.Name, cst.Attribute))
    ]
    flags: set[str] = set()
    if _below_top(mask, flow) or (
        not any(_PADDING.search(word) for word in words)
        and (
            any(_STRUCTURAL.search(word) for word in words)
            or any(isinstance(n, cst.Comparison) and _positional_comparison(n) for n in parts)
            or any(isinstance(n, cst.Call) and callee_name(n) in _KEEPS_ONE for n in parts)
        )
    ):
        flags.add("structural")
    if any(_broadcast_axes(n) >= 2 or _from_lengths(n) for n in parts):
        flags.add("key_only")
    if parameters is not None and _from_caller(mask, flow, parameters):
        flags.add("caller")
    return flags


def _slice_writes(scope: cst.CSTNode) -> _SliceWrites:
    """What each name of the scope has written into a slice of it, and where (`mask[..., -n:] =
    torch.tril(...)`): part of how a mask is built, as its bindings are."""
    found: dict[str, list[tuple[cst.Subscript, cst.BaseExpression]]] = {}
    for node in walk(scope, expressions=False):
        if isinstance(node, cst.Assign):
            for target in node.targets:
                if isinstance(target.target, cst.Subscript) and isinstance(target.target.value, cst.Name):
                    found.setdefault(target.target.value.value, []).append((target.target, node.value))
    return found


def _without_sizes(expression: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The nodes of `expression`, less the arguments of a constructor (`_SIZED`): its size; and less
    the diagonal of a triangle (`torch.triu(ones, diagonal=kv_len - q_len + 1)`): where it runs."""
    stack = [expression]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, cst.Call) and callee_name(node) in _SIZED:
            stack.append(node.func)
        elif isinstance(node, cst.Call) and callee_name(node) in _TRIANGLES:
            stack.extend(
                reversed([node.func, *(node.args[:1] if node.args and node.args[0].keyword is None else [])])
            )
        else:
            stack.extend(reversed(node.children))


def _from_lengths(node: cst.CSTNode) -> bool:
    """A mask made from sequence lengths: `sequence_mask(lengths)`, or a call whose first argument
    holds lengths (`make_pad_mask(src_len)`)."""
    if not isinstance(node, cst.Call):
        return False
    called = callee_name(node)
    if _LENGTHS.search(called):
        return True
    if called in _SIZED or called == "arange":
        return False  # `torch.ones(seq_len, seq_len)`: a size
    first = node.args[0].value if node.args and node.args[0].keyword is None else None
    return _LENGTH_ARGUMENT.search(last_name(first)) is not None


def _below_top(mask: cst.BaseExpression, flow: Flow) -> bool:
    """A top-k mask: a comparison with a threshold taken from a row's top-k, maximum or sorted
    values (`logits < torch.topk(logits, k).values[..., -1, None]`). The row's largest entry is
    never below it, so no row is masked whole, whatever the compared values went through before
    (a model call with a padding mask among its arguments says nothing about this mask)."""
    for node in walk(mask):
        if not isinstance(node, cst.Comparison):
            continue
        sides = [node.left, *(target.comparator for target in node.comparisons)]
        for side in sides:
            bound = flow.history.get(side.value, [])[-1:] if isinstance(side, cst.Name) else [side]
            if any(
                isinstance(n, cst.Call) and callee_name(n) in _KEEPS_ONE
                for value in bound
                if isinstance(value, cst.BaseExpression)
                for n in walk(value)
            ):
                return True
    return False


def _keeps_a_column(site: _Site, sliced: _SliceWrites) -> bool:
    """A `masked_fill` mask cleared at a constant index of its last axis in every row (`mask[..., 0]
    = False`, a top-p filter keeping each row's largest token; transformers' `[...,
    -min_tokens_to_keep:] = 0`): no row is masked whole. (In a `where`, the cleared entries are the
    ones filled.)"""
    if site.kind != "masked_fill" or not isinstance(site.mask, cst.Name):
        return False
    return any(
        _cleared(value)
        and len(written.slice) == 2
        and isinstance(written.slice[0].slice, cst.Index)
        and isinstance(written.slice[0].slice.value, cst.Ellipsis)
        and _constant_place(written.slice[1].slice)
        for written, value in sliced.get(site.mask.value, [])
    )


def _cleared(value: cst.BaseExpression) -> bool:
    return (isinstance(value, cst.Name) and value.value == "False") or (
        isinstance(value, cst.Integer) and value.value == "0"
    )


def _constant_place(element: cst.BaseSlice) -> bool:
    """`0`, `-1`, or a slice with constant bounds (`-n:` with `n` a name counts: a count of tokens)."""
    if isinstance(element, cst.Slice):
        return element.step is None and (element.lower is not None or element.upper is not None)
    if not isinstance(element, cst.Index):
        return False
    value = element.value
    if isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Minus):
        value = value.expression
    return isinstance(value, cst.Integer)


def _keeps_diagonal(site: _Site, flow: Flow) -> bool:
    """A mask whose diagonal is set apart last: `mask & ~torch.eye(n)` before `masked_fill` (the
    diagonal is never filled), `keep | torch.eye(n)` as `where`'s condition (always kept). Each row
    keeps its own key, a padded one too (cornac's SASRec)."""
    mask = site.mask
    if isinstance(mask, cst.Name):
        bound = flow.history.get(mask.value, [])[-1:]
        mask = bound[0] if bound and isinstance(bound[0], cst.BaseExpression) else mask
    if not isinstance(mask, cst.BinaryOperation):
        return False
    operands = (mask.left, mask.right)
    if site.kind == "masked_fill" and isinstance(mask.operator, cst.BitAnd):
        return any(
            isinstance(o, cst.UnaryOperation) and isinstance(o.operator, cst.BitInvert) and _eye(o.expression)
            for o in operands
        )
    return site.kind == "where" and isinstance(mask.operator, cst.BitOr) and any(map(_eye, operands))


def _eye(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Call) and callee_name(node) == "eye"


def _registered(ctx: FileContext, name: str) -> cst.BaseExpression | None:
    """The value this file registers as the buffer `name` (`self.register_buffer("bias", ...)`)."""
    for call in ctx.index.calls:
        if callee_name(call) == "register_buffer" and len(call.args) > 1:
            first = call.args[0].value
            if isinstance(first, cst.SimpleString) and first.evaluated_value == name:
                return call.args[1].value
    return None


def _from_caller(mask: cst.BaseExpression, flow: Flow, parameters: frozenset[str], depth: int = 0) -> bool:
    """A parameter, compared, negated, indexed or cast, or a default built from constructors when
    the caller passes none (`torch.ones(...).tril_()`); not masks combined here (`a & b`)."""
    for node in walk(mask):
        if isinstance(node, (cst.BinaryOperation, cst.BooleanOperation)) and not any(
            isinstance(side, (cst.Integer, cst.Float)) for side in (node.left, node.right)
        ):
            return False
        if not isinstance(node, cst.Name) or node.value in parameters or node.value in {"self", "torch"}:
            continue
        bindings = flow.history.get(node.value, [])
        if bindings and (
            depth >= 2
            or not all(
                not isinstance(b, cst.BaseExpression)
                or b is mask
                or _from_caller(b, flow, parameters, depth + 1)
                for b in bindings
            )
        ):
            return False
    return True


def _broadcast_axes(node: cst.CSTNode) -> int:
    """Axes of size one a mask gets: `[:, None, None, :]`, `.view(b, 1, 1, k)`, two `unsqueeze`s."""
    if isinstance(node, cst.Subscript):
        return sum(
            isinstance(e.slice, cst.Index)
            and isinstance(e.slice.value, cst.Name)
            and e.slice.value.value == "None"
            for e in node.slice
        )
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return 0
    method = node.func.attr.value
    if method in {"view", "reshape", "expand"}:
        return sum(isinstance(arg.value, cst.Integer) and arg.value.value == "1" for arg in node.args)
    inner = node.func.value
    return (
        2
        if method == "unsqueeze" and isinstance(inner, cst.Call) and callee_name(inner) == "unsqueeze"
        else 0
    )


def _positional_comparison(node: cst.Comparison) -> bool:
    sides = [node.left, *(target.comparator for target in node.comparisons)]
    return len(sides) == 2 and all(
        any(
            (isinstance(n, cst.Name) and _POSITIONS.search(n.value))
            or (isinstance(n, cst.Attribute) and _POSITIONS.search(n.attr.value))
            for n in walk(side)
        )
        for side in sides
    )


def _parameters(function: cst.FunctionDef) -> frozenset[str]:
    params = function.params
    every = [
        *named_params(function),
        *(s for s in (params.star_arg, params.star_kwarg) if isinstance(s, cst.Param)),
    ]
    return frozenset(param.name.value for param in every)


def _cleaned_up(ctx: FileContext, scope: Scope, site: _Site) -> bool:
    """The NaN of fully masked rows is removed: `nan_to_num`, or the same mask applied again with 0."""
    mask_code = ctx.code(site.mask) if site.mask is not None else None
    for statement in scope.body:
        for node in walk(statement):
            if not isinstance(node, cst.Call) or node is site.node:
                continue
            name = callee_name(node)
            if name in {"nan_to_num", "nan_to_num_"}:
                return True
            if name in _MASKED_FILL and mask_code is not None:
                function = ctx.qualified(node.func) == "torch.masked_fill"
                mask = argument(node, 1 if function else 0, "mask")
                value = argument(node, 2 if function else 1, "value")
                if (
                    mask is not None
                    and value is not None
                    and ctx.code(mask) == mask_code
                    and ctx.facts.number(value) == 0.0
                ):
                    return True
    return False


def _with_fix(ctx: FileContext, site: _Site, message: str, fact: Fact | None = None) -> Finding:
    """A finding whose fix puts `torch.finfo(<tensor>.dtype).min` in place of the constant, when the
    masked tensor is a plain name or attribute (cheap to name twice)."""
    evidence = fact.why if fact is not None else ()
    caller = fact is not None and fact.caller
    tensor = site.tensor
    # The fix writes `<tensor>.dtype`: only of a name the engine knows holds a tensor there.
    if (
        isinstance(tensor, (cst.Name, cst.Attribute))
        and ctx.facts.of(tensor).kind == TENSOR
        and not tensor.lpar
        and isinstance(site.node, cst.Call)
    ):
        torch, missing = ctx.torch_name()
        dtype = cst.Attribute(value=tensor, attr=cst.Name("dtype"))
        finfo = cst.Call(func=cst.Attribute(value=torch, attr=cst.Name("finfo")), args=[cst.Arg(value=dtype)])
        replacement: cst.BaseExpression = cst.Attribute(value=finfo, attr=cst.Name("min"))
        if -math.inf < site.number < 0:
            # The constant where the dtype holds it, the dtype's lowest where not: float64 and bf16
            # code keeps its mask, and a float64 mask stays finite when a softmax takes it in float32.
            constant = site.value.with_changes(lpar=[], rpar=[])
            replacement = cst.Call(func=cst.Name("max"), args=[cst.Arg(constant), cst.Arg(replacement)])
        if any(arg.value is site.value for arg in site.node.args):
            shown = ctx.code(replacement)
            fix = FixPlan(f"Mask with `{shown}`", ((site.value, replacement),), missing)
            help = f"mask with `{shown}`"
            return Finding(site.node, message, fix=fix, help=help, evidence=evidence, caller_only=caller)
    help = "use `torch.finfo(<scores>.dtype).min`"
    return Finding(site.node, message, help=help, evidence=evidence, caller_only=caller)
