"""AMP007: cumulative sums and products of log-decays and gates in half precision (case 1's sequel)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from amplint.rule import Bad, Good, Rule, Verdict
from amplint.runtime.chains import half_precision_verdict
from amplint.static.context import FileContext, Finding, FixPlan
from amplint.static.flow import Flow, Policy, analyse, value_children
from amplint.static.patterns import (
    argument,
    callee_name,
    function_call,
    is_half_dtype,
    method_call,
    with_dtype,
    with_method,
)
from amplint.static.precision import holds_float32, under_cuda_autocast
from amplint.static.scopes import Scope, scopes_holding, walk

_OPS = frozenset({"cumsum", "cumprod", "logcumsumexp"})
_FUNCTIONS = {f"torch.{op}": op for op in _OPS}
# CUDA autocast runs these in float32 (fp32_set_opt_dtype); it leaves `logcumsumexp` alone.
_AUTOCAST_FP32 = frozenset({"cumsum", "cumprod"})
_EXP_FUNCTIONS = frozenset(
    {"torch.exp", "torch.exp2", "torch.expm1", "torch.special.exp2", "torch.special.expm1"}
)
_EXP_METHODS = frozenset({"exp", "exp2", "expm1", "exp_", "exp2_"})
# Ops whose output lives in log space (log-decays) or is a gate in (0, 1).
_LOG_SPACE = frozenset(
    {
        "torch.log",
        "torch.nn.functional.logsigmoid",
        "torch.nn.functional.softplus",
        "torch.log1p",
        "torch.nn.functional.log_softmax",
        "torch.log_softmax",
    }
)
_LOG_SPACE_METHODS = frozenset({"log", "log1p", "log_softmax"})
_GATES = frozenset({"torch.sigmoid", "torch.nn.functional.sigmoid", "torch.special.expit"})
# Names that code in the RWKV/GLA/Mamba/xLSTM family gives to log-decays and gates.
_DECAY_NAME = re.compile(
    r"^(g|gk|gv|gi|gf|gs|log_?(w|g|gk|a|alpha|decays?|gates?|f|i)|\w+_log|\w*logsig\w*|\w*decay\w*|\w*gate\w*|"
    r"forget\w*)$",
    re.IGNORECASE,
)
# Ops that leave log space: what they return is a probability or a decay factor, not a log-decay.
_LEAVE_LOG_SPACE = frozenset({"exp", "exp2", "softmax", "sigmoid_", "expm1"})
# Names of integer-valued things that are summed up: positions, indices, masks, counts.
_INTEGER_NAME = re.compile(
    r"(mask|ids?$|_ids|index|indices|position|pos$|length|lens?$|count|num_|offset|token|size|boundar|step)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Accumulation:
    call: cst.Call
    op: str
    data: cst.BaseExpression


if TYPE_CHECKING:
    from amplint.diagnostics import Diagnostic
    from amplint.runtime.graph import DtypeGraph, DtypeNode


class HalfPrecisionAccumulation(Rule):
    """
    ## What it does
    Flags `cumsum`, `cumprod` and `logcumsumexp` over log-decays and gates (the value comes from
    `logsigmoid`, `log`, `softplus` or `sigmoid`, carries a decay or gate name such as `g`, `gk`,
    `log_decay`, `vecF_logsig`, or the cumulative sum feeds `exp`) that neither pass
    `dtype=torch.float32` nor upcast their input.

    ## Why is this bad?
    A cumulative sum of log-decays grows with the sequence: after a few hundred steps its magnitude
    is in the hundreds, where bfloat16's 8 mantissa bits leave a spacing of 1 or 2, so each new
    log-decay is rounded away and `exp(cumsum[t] - cumsum[s])`, the decay between two positions,
    comes out wrong or exactly 1. A cumulative product of gates is rounded at every step, so its
    error compounds with the sequence length. This is the precision hazard of chunked
    RWKV/Mamba/GLA/xLSTM reference code. CUDA autocast runs `cumsum` and `cumprod` in float32, but a
    model loaded in bfloat16/float16 and run without autocast (most inference) does not, and no
    autocast upcasts `logcumsumexp`. Integer cumulative sums (positions from an attention mask)
    are exact and not flagged.

    ## Example
    ```python
    g = F.logsigmoid(self.gk_proj(x)) / 16
    g_cumsum = g.cumsum(dim=1)
    decay = torch.exp(g_cumsum[:, -1:] - g_cumsum)
    ```

    ## Fix
    Accumulate in float32 (this changes numerics on purpose):
    ```python
    g_cumsum = g.cumsum(dim=1, dtype=torch.float32)
    ```
    or upcast the input first (`torch.cumsum(g.float(), dim=1)`, as flash-linear-attention's
    layers do). The result is float32: code that runs in bfloat16 without autocast may need a cast
    back before a low-precision matmul that takes it.

    ## References
    - flash-linear-attention `chunk_global_cumsum` and its layers' `torch.cumsum(g.float(), dim=1)`
    - PyTorch autocast op reference: https://pytorch.org/docs/stable/amp.html#autocast-op-reference
    """

    code = "AMP007"
    name = "half-precision-accumulation"
    summary = "cumsum/cumprod/logcumsumexp over log-decays or gates without dtype=torch.float32 or an upcast"
    triggers = frozenset(_OPS)
    region_words = triggers

    bad = (
        Bad(
            """\
import torch
import torch.nn.functional as F


def gla_decay(self, x):
    g = F.logsigmoid(self.gk_proj(x)) / 16
    g_cumsum = g.cumsum(dim=1)
    return torch.exp(g_cumsum[:, -1:] - g_cumsum)
""",
            fixed="""\
import torch
import torch.nn.functional as F


def gla_decay(self, x):
    g = F.logsigmoid(self.gk_proj(x)) / 16
    g_cumsum = g.cumsum(dim=1, dtype=torch.float32)
    return torch.exp(g_cumsum[:, -1:] - g_cumsum)
""",
        ),
        Bad(
            """\
import torch


def ssd_decays(A, dt):
    A = A * dt
    A_cumsum = torch.cumsum(A, dim=-1)
    return torch.exp(A_cumsum[..., -1:] - A_cumsum)
""",
            fixed="""\
import torch


def ssd_decays(A, dt):
    A = A * dt
    A_cumsum = torch.cumsum(A, dim=-1, dtype=torch.float32)
    return torch.exp(A_cumsum[..., -1:] - A_cumsum)
""",
        ),
        Bad(
            """\
import torch


def segment_sum(x):
    x = x[..., None].expand(*x.size(), x.size(-1))
    return torch.cumsum(x, dim=-2)


def intra_chunk(A):
    return torch.exp(segment_sum(A))
""",
            fixed="""\
import torch


def segment_sum(x):
    x = x[..., None].expand(*x.size(), x.size(-1))
    return torch.cumsum(x, dim=-2, dtype=torch.float32)


def intra_chunk(A):
    return torch.exp(segment_sum(A))
""",
        ),
        Bad(
            """\
from torch.nn import functional as F


def mlstm_gates(fgate):
    vecF_logsig = F.logsigmoid(fgate)
    return vecF_logsig.cumsum(-1)
""",
            fixed="""\
import torch
from torch.nn import functional as F


def mlstm_gates(fgate):
    vecF_logsig = F.logsigmoid(fgate)
    return vecF_logsig.cumsum(-1, dtype=torch.float32)
""",
        ),
        Bad(
            """\
import torch


def retention(self, x):
    forget = torch.sigmoid(self.f_proj(x))
    return torch.cumprod(forget, dim=1)
""",
            fixed="""\
import torch


def retention(self, x):
    forget = torch.sigmoid(self.f_proj(x))
    return torch.cumprod(forget, dim=1, dtype=torch.float32)
""",
        ),
        Bad(
            """\
import torch


def cumulative_log_gates(log_gates):
    return torch.logcumsumexp(log_gates, dim=1)
""",
            fixed="""\
import torch


def cumulative_log_gates(log_gates):
    return torch.logcumsumexp(log_gates.to(torch.float32), dim=1)
""",
        ),
    )
    good = (
        Good(
            """\
import torch


def chunk_decay(g):
    g_cumsum = torch.cumsum(g.float(), dim=1)
    return torch.exp(g_cumsum)
""",
            "the input is upcast first (flash-linear-attention)",
        ),
        Good(
            """\
import torch


def chunk_gated_delta_rule(query, key, g):
    query, key, g = [x.transpose(1, 2).to(torch.float32) for x in (query, key, g)]
    query, key, g = (torch.nn.functional.pad(x, (0, 1)) for x in (query, key, g))
    g = g.cumsum(dim=-1)
    return torch.exp(g)
""",
            "upcast in a comprehension, then padded in another (qwen3_next, kimi_linear)",
        ),
        Good(
            """\
def position_ids_from_mask(attention_mask):
    return attention_mask.long().cumsum(-1) - 1
""",
            "an integer cumulative sum (positions) is exact",
        ),
        Good(
            """\
import torch


def incremental_indices(input_ids, padding_idx):
    mask = input_ids.ne(padding_idx).int()
    return (torch.cumsum(mask, dim=1).type_as(mask)) * mask + padding_idx
""",
            "positions counted from a padding mask",
        ),
        Good(
            """\
import torch


def decay(g):
    return torch.exp(g.cumsum(-1, dtype=torch.float32))
""",
            "the cumulative sum is asked to accumulate in float32",
        ),
        Good(
            """\
import torch


def chunk(g):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return torch.exp(torch.cumsum(g, dim=-1))
""",
            "CUDA autocast runs `cumsum` in float32",
        ),
        Good(
            """\
import torch


def betas_to_alphas_cumprod(num_steps):
    betas = torch.linspace(1e-4, 0.02, num_steps, dtype=torch.float32)
    alphas = 1.0 - betas
    return torch.cumprod(alphas, dim=0)
""",
            "a noise schedule created in float32 (diffusers' schedulers)",
        ),
        Good(
            """\
import torch


def top_p(sorted_logits, p):
    cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    return cumulative_probs > p
""",
            "cumulative probabilities for top-p sampling, not a decay",
        ),
        Good(
            """\
import torch


def top_h(probs, top_h):
    log_probs = torch.log(probs)
    entropy_terms = -probs * log_probs
    return torch.cumsum(entropy_terms, dim=-1)
""",
            "cumulative entropy terms `-p * log(p)`: a product of two tensors is no log-decay "
            "(transformers' top-h sampling)",
        ),
    )

    @classmethod
    def confirm(cls, diagnostic: Diagnostic, nodes: Sequence[DtypeNode], graph: DtypeGraph) -> Verdict | None:
        return half_precision_verdict(graph, nodes, "the accumulation runs in half precision")

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        candidates = [call for call in ctx.index.calls if callee_name(call) in _OPS]
        if not candidates:
            return
        for scope in scopes_holding(ctx, candidates):
            yield from _scan(ctx, scope)


def _accumulation(ctx: FileContext, call: cst.Call) -> Accumulation | None:
    receiver = method_call(ctx, call, _OPS)
    if receiver is not None:
        assert isinstance(call.func, cst.Attribute)
        dtype = argument(call, 1, "dtype")
        op, data = call.func.attr.value, receiver
    elif function_call(ctx, call, frozenset(_FUNCTIONS)):
        dtype = argument(call, 2, "dtype")
        op, data = _FUNCTIONS[ctx.qualified(call.func) or ""], argument(call, 0, "input")  # type: ignore[assignment]
    else:
        return None
    if data is None or (dtype is not None and not is_half_dtype(ctx, dtype)):
        return None  # an explicit dtype is the author's choice
    return Accumulation(call, op, data)


def _scan(ctx: FileContext, scope: Scope) -> Iterator[Finding]:
    function = scope.node if isinstance(scope.node, cst.FunctionDef) else None
    low: dict[cst.Call, Accumulation] = {}
    evidence: dict[cst.Call, str] = {}
    judged: set[cst.Call] = set()

    def seed(node: cst.BaseExpression, flow: Flow) -> bool:
        if not isinstance(node, cst.Call):
            return False
        if node not in judged:
            judged.add(node)
            found = _accumulation(ctx, node)
            if found is not None and _low_precision(ctx, found, flow, function):
                low[node] = found
                reason = _log_space_origin(ctx, found.data, flow)
                if reason is not None:
                    evidence[node] = reason
        return node in low

    def sink(node: cst.BaseExpression, flow: Flow) -> str | None:
        if function_call(ctx, node, _EXP_FUNCTIONS) or method_call(ctx, node, _EXP_METHODS) is not None:
            return "exp"
        return None

    policy = Policy(seed=seed, sink=sink)
    flow = analyse(scope, policy)
    if not low:
        return
    for hit in flow.hits.values():
        if isinstance(hit.origin, cst.Call) and hit.origin in low:
            evidence.setdefault(hit.origin, "its cumulative sum feeds `exp`")
    if function is not None and any(call not in evidence for call in low):
        returned = _returned_origins(function, flow)
        if returned and function.name.value in _called_under_exp(ctx):
            for call in low:
                if call in returned:
                    evidence.setdefault(call, f"`{function.name.value}` returns it into `exp`")
    for call, found in low.items():
        if call in evidence and not _integer_valued(ctx, found.data, flow):
            yield _finding(ctx, found, evidence[call])


def _low_precision(
    ctx: FileContext, found: Accumulation, flow: Flow, function: cst.FunctionDef | None
) -> bool:
    if found.op in _AUTOCAST_FP32 and under_cuda_autocast(ctx, found.call):
        return False
    return not holds_float32(ctx, found.data, flow, function)


def _values(ctx: FileContext, node: cst.BaseExpression, flow: Flow) -> Iterator[cst.CSTNode]:
    """What a value is computed from within its function: the expressions its names were bound
    to, followed through arithmetic and method chains (not into the arguments of other calls)."""
    stack: list[cst.CSTNode] = [node]
    seen: set[int] = set()
    used: dict[str, int] = {}
    while stack and len(seen) < 64:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, cst.Name):
            history = flow.history.get(current.value, [])
            count = used.get(current.value, 0)
            if count < len(history):
                used[current.value] = count + 1
                stack.append(history[-1 - count])
        elif isinstance(current, cst.AugAssign):
            stack.extend((current.target, current.value))
        elif isinstance(current, cst.Call):
            if callee_name(current) in _LEAVE_LOG_SPACE:
                continue
            if isinstance(current.func, cst.Attribute) and ctx.qualified(current.func) is None:
                stack.append(current.func.value)
            elif ctx.qualified(current.func) == "torch.where":
                # `torch.where(mask, g, 0)`: the values, not the condition.
                stack.extend(arg.value for arg in current.args[1:3])
            else:
                first = next(
                    (arg.value for arg in current.args if arg.keyword is None and not arg.star), None
                )
                if first is not None:
                    stack.append(first)
        elif isinstance(current, cst.BinaryOperation):
            # A product of two tensors (`-p * log_p`, an entropy term) has left log space; a log-decay
            # scaled by a number or divided by a normaliser (`logsigmoid(x) / 16`) has not.
            if not (
                isinstance(current.operator, cst.Multiply)
                and not any(_is_number(side) for side in (current.left, current.right))
            ):
                stack.extend(value_children(current))
        elif isinstance(current, (cst.UnaryOperation, cst.Subscript, cst.Attribute)):
            stack.extend(value_children(current))
        elif isinstance(current, (cst.ListComp, cst.GeneratorExp)):
            stack.append(current.elt)


def _is_number(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.UnaryOperation):
        node = node.expression
    return isinstance(node, (cst.Integer, cst.Float))


def _log_space_origin(ctx: FileContext, data: cst.BaseExpression, flow: Flow) -> str | None:
    """Why the accumulated value is a log-decay or a gate, or None."""
    for node in _values(ctx, data, flow):
        if isinstance(node, cst.Call):
            qualified = ctx.qualified(node.func)
            if qualified in _LOG_SPACE or qualified in _GATES:
                return f"it comes from `{qualified.rsplit('.', 1)[-1]}`"
            if method_call(ctx, node, _LOG_SPACE_METHODS | {"sigmoid"}) is not None:
                return f"it comes from `{node.func.attr.value}`"  # type: ignore[attr-defined]
        elif isinstance(node, cst.Name) and _DECAY_NAME.match(node.value):
            return f"it is the log-decay or gate `{node.value}`"
    return None


def _integer_valued(ctx: FileContext, data: cst.BaseExpression, flow: Flow) -> bool:
    """Masks, positions, counts: exact in any dtype up to 256 (bfloat16) and not decays."""
    for node in _values(ctx, data, flow):
        if isinstance(node, cst.Comparison) or (
            isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.BitInvert)
        ):
            return True
        if method_call(ctx, node, frozenset({"long", "int", "bool", "short", "byte"})) is not None:
            return True
        if isinstance(node, cst.Name) and _INTEGER_NAME.search(node.value):
            return True
    return False


def _returned_origins(function: cst.FunctionDef, flow: Flow) -> set[cst.CSTNode]:
    """The seeds that reach the values the function returns (its own `return`s, not nested ones)."""
    origins: set[cst.CSTNode] = set()
    stack: list[cst.CSTNode] = (
        list(function.body.body) if isinstance(function.body, cst.IndentedBlock) else []
    )
    for node in _own_nodes(stack):
        if isinstance(node, cst.Return) and node.value is not None:
            origins |= flow.taint(node.value)
    return origins


def _own_nodes(statements: list[cst.CSTNode]) -> Iterator[cst.CSTNode]:
    for statement in statements:
        for node in walk(statement):
            if not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                yield node


def _called_under_exp(ctx: FileContext) -> frozenset[str]:
    """Names of functions of this module called inside an `exp(...)`: `torch.exp(segment_sum(A))`."""
    cached = ctx.memo.get("amp007_called_under_exp")
    if isinstance(cached, frozenset):
        return cached
    names: set[str] = set()
    local = ctx.index.function_names
    for call in ctx.index.calls:
        if function_call(ctx, call, _EXP_FUNCTIONS):
            inside: cst.CSTNode | None = argument(call, 0, "input")
        elif method_call(ctx, call, _EXP_METHODS) is not None:
            inside = call.func.value  # type: ignore[attr-defined]
        else:
            continue
        for node in walk(inside) if inside is not None else ():
            if isinstance(node, cst.Call):
                func = node.func
                name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)
                if name in local:
                    names.add(name)
    result = frozenset(names)
    ctx.memo["amp007_called_under_exp"] = result
    return result


def _finding(ctx: FileContext, found: Accumulation, why: str) -> Finding:
    op = found.op
    if op == "cumsum":
        hazard = (
            "the running sum grows with the sequence while bfloat16 keeps 8 mantissa bits, so once it is a "
            "few hundred times a term each new term is rounded away and the decays taken from it come out wrong"
        )
    elif op == "cumprod":
        hazard = "the product is rounded at every step, so its error compounds with the sequence length"
    else:
        hazard = "the running log-sum is rounded at every step, and its error grows with the sequence length"
    autocast = (
        "no autocast upcasts `logcumsumexp`"
        if op == "logcumsumexp"
        else f"CUDA autocast would run `{op}` in float32, a model run in float16/bfloat16 without autocast does not"
    )
    message = f"`{op}` accumulates a log-decay or gate in half precision ({why}): {autocast}; {hazard}"
    float32, missing_import = ctx.float32()
    if op == "logcumsumexp":
        upcast = with_method(found.data, "to", float32)
        fixed = found.call.deep_replace(found.data, upcast)
        description = "Upcast the input of `logcumsumexp` to float32"
    else:
        fixed = with_dtype(found.call, float32)
        description = f"Accumulate `{op}` in float32"
    shown = " ".join(ctx.code(fixed).split())
    return Finding(
        found.call,
        message,
        fix=FixPlan(description, ((found.call, fixed),), missing_import),
        help=f"accumulate in float32: `{shown}`",
    )
