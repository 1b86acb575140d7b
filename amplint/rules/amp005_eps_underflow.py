"""AMP005: stabilising constants that float16 cannot hold (cases 3 and 4)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from amplint.rule import Rule, Verdict
from amplint.runtime.chains import half_precision_verdict
from amplint.static.constants import FP16_FLUSH
from amplint.static.context import FileContext, Finding, scopes_holding
from amplint.static.facts import Fact, why_half
from amplint.static.flow import Flow, Policy, analyse
from amplint.static.ops import F16
from amplint.static.patterns import argument, callee_name, lineage, method_call
from amplint.static.scopes import Scope, named_params, walk

if TYPE_CHECKING:
    from amplint.diagnostics import Diagnostic
    from amplint.runtime.graph import DtypeGraph, DtypeNode

# A constant float16 rounds to zero (at most 2**-25, about 3e-8) as the code writes it: an exponent
# of -8 or below, seven zeros after the point, the `tiny` of a `finfo` or its `eps` (float64's).
_TINY = (
    r"\d[eE]-0*(?:[89]|[1-9]\d)\b|\.0{7}|\.[ \t]*(?:tiny|smallest_normal)\b|finfo\([^)]*\)[ \t]*\.[ \t]*eps\b"
)
# A name an epsilon may be bound to, in any case and as part of a longer name (`self.EPS`, `loo_eps`).
_EPS_NAME = r"(?i:(?<![a-z0-9])eps(?:ilon)?(?![a-z0-9]))"
_CLAMP_METHODS = frozenset({"clamp", "clamp_", "clip", "clip_", "clamp_min", "clamp_min_"})
_CLAMP_FUNCTIONS = frozenset({"torch.clamp", "torch.clip", "torch.clamp_min"})
# Functions that apply `eps` in their compute dtype, with the position of `eps` among the positional
# arguments.
_EPS_FUNCTIONS = {
    "torch.nn.functional.normalize": 3,
    "torch.nn.functional.cosine_similarity": 3,
    "torch.cosine_similarity": 3,
    "torch.logit": 1,
    "torch.special.logit": 1,
}
_LOGS = frozenset({"log", "log2", "log10", "log_"})
_GUARD_CALLS = _CLAMP_METHODS | {"normalize", "cosine_similarity", "logit"}
# Ops whose outputs are often zero, or underflow below 6e-8, in float16.
_UNDERFLOWING = frozenset(
    {"softmax", "sigmoid", "relu", "relu_", "uniform_", "rand", "rand_like", "bernoulli", "expit"}
)
_ZERO_NAME = re.compile(r"(mask|count|present|valid|^probs?$|_probs?$|^probs?_|probabilit)", re.IGNORECASE)
_MASK_NAME = re.compile(r"mask", re.IGNORECASE)
# Routing weights picked by top-k: their sum is at least the largest of them, never zero.
_TOP_K = re.compile(r"top_?k", re.IGNORECASE)
_HELP = (
    "add the guard in float32 (`x.float() + 1e-12`, or upcast before the reduction), or use a value "
    "float16 can hold: at least 6.1e-5 to stay a normal number (1e-6 and 1e-7 survive as subnormals)"
)


@dataclass(frozen=True)
class _Site:
    """A guard: `kind` `add` (`n + 1e-12`), `clamp` (a floor) or `eps` (`F.normalize(eps=...)`);
    `tensor` the value it guards, `fact` the dtypes the guard is applied in."""

    node: cst.CSTNode
    kind: str
    value: cst.BaseExpression
    number: float
    tensor: cst.BaseExpression
    fact: Fact
    function: str = ""


class EpsUnderflow(Rule):
    """
    ## What it does
    Flags stabilising constants too small for float16 (at or below 2**-25, about 3e-8: `1e-8`,
    `1e-12`, `1e-20`, `torch.finfo(torch.float32).tiny`, written out or held by a module constant,
    a parameter's default or `self.eps`) where they guard a value that is often zero, or below
    float16's smallest value, in practice: a probability or sigmoid output, a random sample, a ReLU
    output, a value zeroed by a mask, or a mask count. The guard is an epsilon added to a denominator
    or a `log` argument (`x / (n + 1e-12)`), a clamp floor (`clamp(min=1e-20)`, `clamp_min(1e-9)`),
    or the `eps=` of `F.normalize`, `F.cosine_similarity` and `torch.logit`. The dtype-facts engine
    says where the guard is applied in float16; in a project that runs in bfloat16 only (whose range
    is float32's) nothing is reported.

    Its hazard needs half precision, so it is reported where the project runs the code in
    bf16/fp16 (an execution mode found in its scripts, tests or configuration, named in the
    message); where nothing in the project does, the finding is conditional and shown only with
    `--show-conditional` (docs/usage.md#execution-modes).

    Off by default (opt-in) after review 34: on public projects it was not written against it was
    read 20 times on first contact (docs/measured.md): 4 real. Most were guards on values the
    project holds in float32 (logits its callers upcast, the output of an op autocast runs in
    float32, a float32 mask) or in code it never runs. Turn it on with `--extend-select AMP005` or
    `extend-select = ["AMP005"]` under `[tool.amplint]`.

    ## Why is this bad?
    float16's smallest positive value is 2**-24 (about 5.96e-8); anything at or below half of it
    rounds to zero. `1e-8`, `1e-10`, `1e-12` and `1e-20` therefore vanish in float16: `n + 1e-12`
    is `n`, `clamp(min=1e-12)` clamps to 0, and the division, `log` or normalisation they guard
    returns inf or NaN for exactly the input they were written for: an all-padding row, an empty
    mask, a probability that underflowed, a uniform sample that rounded to 0 or 1. Not flagged:
    bfloat16 (it has float32's range and keeps these values); `nn.LayerNorm(eps=1e-12)`,
    `F.layer_norm`, `F.group_norm` and `F.batch_norm`, which apply `eps` inside kernels that
    accumulate in float32; guards on values that are float32 (upcast, built by `torch.tensor`/
    `torch.rand` or with `dtype=torch.float32`, NumPy, a scheduler's float32 state); guards on the
    output of `sum`, `pow`, `norm`, `exp`, `log` or `softmax` under CUDA autocast, which run in
    float32 there; sums of top-k router weights, which are never zero; and norms, standard
    deviations and learned scales, which are zero only for degenerate inputs.

    ## Example
    ```python
    mask = attention_mask.unsqueeze(-1).to(hidden_states.dtype)
    pooled = (hidden_states * mask).sum(1) / mask.sum(1).clamp_min(1e-9)
    ```

    ## Fix
    Compute the guarded value in float32, or use an epsilon float16 can hold:
    ```python
    mask = attention_mask.unsqueeze(-1).float()
    pooled = ((hidden_states * mask).sum(1) / mask.sum(1).clamp_min(1e-9)).to(hidden_states.dtype)
    ```

    ## References
    - `torch.finfo(torch.float16)`: `tiny` 6.1e-5, `smallest_normal` 6.1e-5; subnormals down to 5.96e-8
    - PyTorch autocast op reference: https://pytorch.org/docs/stable/amp.html#autocast-op-reference
    """

    code = "AMP005"
    name = "eps-underflow"
    default_on = False
    summary = (
        "eps/clamp floor below float16's smallest value (1e-8, 1e-12, 1e-20) guarding a half-precision tensor"
    )
    rests_on_half = True
    # Such a constant is written somewhere in the file (`_TINY`; `1e-12` holds the word `e`): most
    # files guard with nothing smaller than `1e-6`, and are not read for the rule.
    triggers = frozenset({"e", "E", "tiny", "smallest_normal", "eps"})
    trigger_pattern = re.compile(_TINY)
    # A body with such a constant, or an `eps` name it may be bound to (`self.eps`, set in `__init__`,
    # which stays with a kept method's class).
    region_words = frozenset({"tiny", "smallest_normal"})
    region_pattern = re.compile(f"{_TINY}|{_EPS_NAME}")

    @classmethod
    def confirm(cls, diagnostic: Diagnostic, nodes: Sequence[DtypeNode], graph: DtypeGraph) -> Verdict | None:
        return half_precision_verdict(graph, nodes, "the guarded value is computed in half precision")

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        sites = {node: site for node in ctx.index.top_of if (site := _site(ctx, node)) is not None}
        for scope in scopes_holding(ctx, sites) if sites else ():
            yield from _check_scope(ctx, scope, sites)


def _site(ctx: FileContext, node: cst.CSTNode) -> _Site | None:
    """A guard, applied where the value can be float16, by a constant that float16 rounds to zero."""
    pairs: tuple[tuple[cst.BaseExpression | None, cst.BaseExpression | None], ...]  # (constant, guarded)
    kind, function = "add", ""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        pairs = ((node.right, node.left), (node.left, node.right))
    elif isinstance(node, cst.Call) and callee_name(node) in _GUARD_CALLS:
        function = ctx.qualified(node.func) or ""
        if function in _EPS_FUNCTIONS:
            kind = "eps"
            guarded = argument(node, 0, "input") or argument(node, 0, "x1")
            pairs = ((argument(node, _EPS_FUNCTIONS[function], "eps"), guarded),)
        elif function in _CLAMP_FUNCTIONS:
            kind, pairs = "clamp", ((argument(node, 1, "min"), argument(node, 0, "input")),)
        else:
            kind, pairs = "clamp", ((argument(node, 0, "min"), method_call(ctx, node, _CLAMP_METHODS)),)
    else:
        return None
    for value, tensor in pairs:
        if value is None or tensor is None:
            continue
        number = ctx.facts.number(value)
        if number is not None and 0.0 < number <= FP16_FLUSH:
            fact = ctx.facts.of(node)
            return _Site(node, kind, value, number, tensor, fact, function) if fact.may_be_fp16 else None
    return None


def _check_scope(ctx: FileContext, scope: Scope, sites: Mapping[cst.CSTNode, _Site]) -> Iterator[Finding]:
    """The guards of values that can be zero, judged where they stand (names as bound there)."""
    found: list[_Site] = []
    numerators: dict[cst.CSTNode, cst.BaseExpression] = {}
    logs: set[cst.CSTNode] = set()  # the arguments of `log` calls

    def seed(node: cst.BaseExpression, flow: Flow) -> bool:
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Divide):
            numerators[node.right] = node.left
        if isinstance(node, cst.Call) and callee_name(node) in _LOGS:
            method = isinstance(node.func, cst.Attribute) and not node.args  # `(p + eps).log()`
            logged = node.func.value if method else argument(node, 0, "input")  # type: ignore[attr-defined]
            if logged is not None:
                logs.add(logged)
        site = sites.get(node)
        if (
            site is not None
            and site not in found
            and (_passed_in(site, flow) or _can_be_zero(ctx, site.tensor, flow))
        ):
            numerator = numerators.get(node)
            # Routing weights divided by their (never zero) sum.
            if not _top_k(ctx, site.tensor, flow) and (numerator is None or not _top_k(ctx, numerator, flow)):
                found.append(site)
        return False

    def _passed_in(site: _Site, flow: Flow) -> bool:
        """A helper's clamp floor, denominator or `log` guard of a parameter (`def log(t, eps=1e-20)`
        returning `torch.log(t.clamp(min=eps))` or `torch.log(t + eps)`): what its callers pass
        cannot be seen here, and guarding it is what the helper is for."""
        node = site.tensor
        guard = site.kind == "clamp" or site.node in numerators or site.node in logs
        return (
            guard
            and isinstance(node, cst.Name)
            and node.value in parameters
            and not flow.history.get(node.value)
        )

    parameters = (
        {p.name.value for p in named_params(scope.node)} if isinstance(scope.node, cst.FunctionDef) else set()
    )
    analyse(scope, Policy(seed=seed))
    yield from (_finding(ctx, site) for site in found)


def _steps(ctx: FileContext, node: cst.BaseExpression, flow: Flow) -> Iterator[cst.CSTNode]:
    """The lineage of a value, and of the names and calls inside a compound expression."""
    stack: list[cst.CSTNode] = [node]
    seen = 0
    used: dict[str, int] = {}  # a name met again goes on to its earlier bindings (`x = f(x)`)
    while stack and seen < 64:
        for step in lineage(ctx, stack.pop(), flow, used):  # type: ignore[arg-type]
            seen += 1
            yield step
            if isinstance(step, cst.BinaryOperation):
                stack.extend((step.left, step.right))
            elif isinstance(step, cst.UnaryOperation):
                stack.append(step.expression)
            elif isinstance(step, cst.Call) and isinstance(step.func, cst.Name):
                stack.extend(arg.value for arg in step.args[1:])


def _can_be_zero(ctx: FileContext, node: cst.BaseExpression, flow: Flow) -> bool:
    """Whether the guarded value is one that is often zero, or below 6e-8, in float16: a
    probability, a random sample (small ones flush to zero), a ReLU output, a value zeroed by a mask
    (`where(m, x, 0.0)`, `masked_fill(m, 0)`, `x * mask`), or a mask count. A norm, standard
    deviation or variance of activations is zero only for an all-zero input, and the guard there is
    a precaution that float16 does not make worse in practice."""
    for step in _steps(ctx, node, flow):
        if isinstance(step, (cst.Name, cst.Attribute)):
            if _ZERO_NAME.search(step.value if isinstance(step, cst.Name) else step.attr.value):
                return True
        elif isinstance(step, cst.BinaryOperation) and isinstance(step.operator, cst.Multiply):
            if any(isinstance(n, cst.Name) and _MASK_NAME.search(n.value) for n in walk(step)):
                return True
        elif isinstance(step, cst.Call):
            name = callee_name(step)
            if name in _UNDERFLOWING:
                return True
            if name in {"where", "masked_fill", "masked_fill_"} and any(
                ctx.facts.number(arg.value) == 0.0 for arg in step.args
            ):
                return True
    return False


def _top_k(ctx: FileContext, node: cst.BaseExpression, flow: Flow) -> bool:
    """A sum of weights picked by top-k or gathered by expert index (a router's): at least the
    largest of them, never zero."""
    return any(
        (isinstance(step, cst.Name) and _TOP_K.search(step.value))
        or (isinstance(step, cst.Call) and callee_name(step) in {"topk", "gather"})
        for step in _steps(ctx, node, flow)
    )


def _finding(ctx: FileContext, site: _Site) -> Finding:
    code = ctx.code(site.value)
    literal = code.replace(".", "").replace("-", "").replace("e", "").isdigit()
    value = "" if literal else f" (= `{site.number:g}`)"
    shown = f"`{'eps=' if site.kind == 'eps' else ''}{code}`{value}"
    if site.kind == "add":
        message = (
            f"{shown} added as a guard rounds to zero in float16 (smallest positive value 6e-8), so "
            "it guards nothing there: a zero denominator, variance or probability still gives inf or NaN"
        )
    elif site.kind == "clamp":
        message = (
            f"a clamp floor of {shown} rounds to zero in float16 (smallest positive value 6e-8), so the "
            "clamp lets zeros through: the division, log or rsqrt it guards gives inf or NaN"
        )
    else:
        function = site.function.rsplit(".", 1)[-1]
        outcome = "0 and 1 give -inf and inf" if function == "logit" else "an all-zero input gives NaN"
        message = (
            f"{shown} in `{function}` rounds to zero on float16 input (smallest positive value 6e-8): "
            f"{outcome}"
        )
    fact = site.fact.for_dtype(F16)  # a float16 hazard: the float16 mode's evidence
    why = why_half(fact, "fp16")
    return Finding(site.node, f"{message}; {why}", help=_HELP, evidence=fact.why, caller_only=fact.caller)
