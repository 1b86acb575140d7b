"""AMP001: the RWKV7 regression (case 1)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import libcst as cst

from amplint.diagnostics import Confidence, Diagnostic
from amplint.rule import Bad, Good, Rule, Verdict
from amplint.runtime.chains import HALF, describe_error, measured_error, upcast_reached, where
from amplint.static.context import FileContext, Finding, FixPlan
from amplint.static.flow import Flow, Policy, analyse_all
from amplint.static.patterns import (
    argument,
    function_call,
    is_fp32_value,
    is_matmul,
    method_call,
    upcast_input,
)
from amplint.static.scopes import scopes_holding

_FUNCTIONS = {
    "torch.sigmoid": "sigmoid",
    "torch.tanh": "tanh",
    "torch.special.expit": "sigmoid",
    "torch.nn.functional.sigmoid": "sigmoid",
    "torch.nn.functional.tanh": "tanh",
    "torch.nn.functional.logsigmoid": "logsigmoid",
}
_METHODS = frozenset({"sigmoid", "tanh"})
_SINK_FUNCTIONS = {
    f"torch.{name}": name for name in ("exp", "exp2", "expm1", "cumsum", "cumprod", "logcumsumexp")
}
_SINK_METHODS = frozenset(name for name in _SINK_FUNCTIONS.values())
# Names that code in the RWKV/GLA/Mamba family gives to log-space decays and gates.
_LOG_DECAY_NAME = re.compile(
    r"^(log_?w|w_?log|gk|log_?gk|log_?g|g_?log|log_?gates?|log_?alpha|alpha_?log|.*decay.*)$",
    re.IGNORECASE,
)
# `w` alone is also a weight, a window, a soft-capped logit: it counts as a log-decay only when the
# value is negated, as log-decays are (`w = -exp(-0.5) * sigmoid(x)`).
_GENERIC_DECAY_NAME = re.compile(r"^w$", re.IGNORECASE)


if TYPE_CHECKING:
    from amplint.runtime.graph import DtypeGraph, DtypeNode

# The aten op each flagged call becomes in a trace.
_TRACED_OPS = {"sigmoid": "sigmoid", "expit": "sigmoid", "tanh": "tanh", "logsigmoid": "log_sigmoid_forward"}


class LowPrecisionLogWeights(Rule):
    """
    ## What it does
    Flags `sigmoid`, `tanh` and `logsigmoid` whose output becomes a log-space weight or decay (it
    flows into `exp`, `cumsum`/`cumprod` or a multiplicative recurrence, or is bound to a log-decay
    name such as `w`, `log_w`, `decay` or `gk`) while their input is not upcast to float32.

    ## Why is this bad?
    CUDA autocast runs `exp`, `softplus`, `cumsum` and friends in float32, but `sigmoid`, `tanh` and
    `logsigmoid` are on no cast list: they keep their input's dtype, which after a Linear layer is
    bfloat16 (8 mantissa bits) or float16. The log-space weight is then rounded before anything
    upcasts it, and in a recurrence the decay is multiplied over thousands of steps, so the error
    compounds with context length. This is how RWKV7's log-decay silently moved from float32 to
    bfloat16 when `-softplus(...) - 0.5` was rewritten as `-exp(-0.5) * sigmoid(...)`.

    ## Example
    ```python
    w = -math.exp(-0.5) * self.w_lora(xw).sigmoid()
    ```

    ## Fix
    Upcast the input before the op that does not upcast by itself (this changes numerics on purpose):
    ```python
    w = -math.exp(-0.5) * self.w_lora(xw).to(torch.float32).sigmoid()
    ```
    The log-weight then stays float32, as the recurrence wants it. Under autocast the matmuls
    that consume it cast it back by themselves; code that runs in bfloat16 without autocast may
    need a cast before a low-precision matmul that takes it.

    ## References
    - PyTorch autocast op reference: https://pytorch.org/docs/stable/amp.html#autocast-op-reference
    - flash-linear-attention RWKV7 time-mix, log-decay `w`
    """

    code = "AMP001"
    name = "low-precision-log-weights"
    summary = "sigmoid/tanh/logsigmoid output used as a log-space weight or decay without a float32 upcast"
    triggers = frozenset({"sigmoid", "tanh", "logsigmoid", "expit"})
    region_words = triggers

    bad = (
        Bad(
            """\
import math
import torch
from torch import nn


class TimeMix(nn.Module):
    def forward(self, xw):
        w = -math.exp(-0.5) * self.w_lora(xw).sigmoid()
        return w
""",
            fixed="""\
import math
import torch
from torch import nn


class TimeMix(nn.Module):
    def forward(self, xw):
        w = -math.exp(-0.5) * self.w_lora(xw).to(torch.float32).sigmoid()
        return w
""",
        ),
        Bad(
            """\
import torch as th


def decay_weights(x):
    return th.exp(-th.sigmoid(x))
""",
            fixed="""\
import torch as th


def decay_weights(x):
    return th.exp(-th.sigmoid(x.to(th.float32)))
""",
        ),
        Bad(
            """\
from torch.nn import functional as F


def gates(self, x):
    gk = F.logsigmoid(self.gk_proj(x)) / 16
    return gk
""",
            fixed="""\
import torch
from torch.nn import functional as F


def gates(self, x):
    gk = F.logsigmoid(self.gk_proj(x).to(torch.float32)) / 16
    return gk
""",
        ),
        Bad(
            """\
import torch


def scan(x, k, v):
    a = torch.sigmoid(x)
    state = torch.zeros_like(v[:, 0])
    for t in range(x.shape[1]):
        state = state * a[:, t] + k[:, t] * v[:, t]
    return state
""",
            fixed="""\
import torch


def scan(x, k, v):
    a = torch.sigmoid(x.to(torch.float32))
    state = torch.zeros_like(v[:, 0])
    for t in range(x.shape[1]):
        state = state * a[:, t] + k[:, t] * v[:, t]
    return state
""",
        ),
        Bad(
            """\
import torch


def cumulative_gate(a, b):
    g = (a + b).tanh()
    return g.cumsum(dim=1).exp()
""",
            fixed="""\
import torch


def cumulative_gate(a, b):
    g = (a + b).to(torch.float32).tanh()
    return g.cumsum(dim=1).exp()
""",
        ),
        Bad(
            """\
from torch import sigmoid, cumsum


def log_decay(x):
    return cumsum(-sigmoid(x - 1), dim=-1)
""",
            fixed="""\
import torch
from torch import sigmoid, cumsum


def log_decay(x):
    return cumsum(-sigmoid((x - 1).to(torch.float32)), dim=-1)
""",
        ),
    )
    good = (
        Good(
            """\
import math


def forward(self, xw):
    w = -math.exp(-0.5) * self.w_lora(xw).float().sigmoid()
    return w
""",
            "the input is upcast before the sigmoid",
        ),
        Good(
            """\
import torch
import torch.nn.functional as F


def forward(self, xw):
    w = -F.softplus(-(self.w0 + torch.tanh(xw @ self.w1) @ self.w2)) - 0.5
    return w
""",
            "the tanh output feeds a matmul, which rounds to the autocast dtype anyway; the log-decay "
            "comes from softplus, which autocast runs in float32",
        ),
        Good(
            """\
import torch


def forward(self, x):
    x = x.to(dtype=torch.float32)
    w = torch.sigmoid(x)
    return torch.exp(-w)
""",
            "the name was bound to a float32 upcast earlier in the function",
        ),
        Good(
            """\
import torch


def forward(self, x):
    gate = torch.sigmoid(self.gate_proj(x))
    return x * gate
""",
            "a multiplicative gate, not a log-space weight",
        ),
        Good(
            """\
import math
import torch


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
""",
            "tanh inside an activation function",
        ),
        Good(
            """\
def sigmoid(x):
    return 1 / (1 + x)


def forward(x):
    w = sigmoid(x)
    return w
""",
            "a local function named sigmoid is not torch's",
        ),
        Good(
            """\
import torch


def decode(self, hidden_states):
    for conv in self.time_conv:
        hidden_states = conv(hidden_states)
        hidden_states *= torch.sigmoid(hidden_states)
    return hidden_states
""",
            "SiLU inside a loop over layers: the factor is computed from the state itself (emu3)",
        ),
        Good(
            """\
def detect(detector, prompts):
    results = []
    for prompt in prompts:
        out = detector(prompt)
        probs = out.pred_logits.sigmoid()
        presence = out.presence_logits.sigmoid()
        probs = probs * presence
        results.append(probs)
    return results
""",
            "a name rebound afresh in every iteration carries no state across steps (sam3_video)",
        ),
        Good(
            """\
import torch
import torch.nn.functional as F


def route(flat, weight, idx):
    with torch.autocast("cuda", enabled=False):
        logits = F.linear(flat.float(), weight.float())
        top = torch.cat([logits.gather(-1, idx), logits[..., -1:]], dim=-1)
        log_probs = F.logsigmoid(top)
        return torch.exp(log_probs - torch.logsumexp(log_probs, dim=-1, keepdim=True))
""",
            "a product of upcast operands, concatenated, is float32 (inkling)",
        ),
        Good(
            """\
import torch


def attend(q, k, v, scaling, softcap):
    w = torch.matmul(q * scaling, k.transpose(-1, -2))
    w = torch.tanh(w / softcap) * softcap
    w = torch.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
    return w @ v
""",
            "`w` holding soft-capped attention logits is not a log-decay",
        ),
    )

    @classmethod
    def confirm(cls, diagnostic: Diagnostic, nodes: Sequence[DtypeNode], graph: DtypeGraph) -> Verdict | None:
        squashing = [node for node in nodes if node.op == diagnostic.extra.get("op")]
        if not squashing:
            return None
        half = [node for node in squashing if node.dtype in HALF]
        if not half:
            node = squashing[0]
            return Verdict(
                Confidence.REFUTED,
                f"`{node.op}` at {where(node)} ran in {node.dtype}: its input was already {node.input_dtypes[0]}",
            )
        node = half[0]
        evidence = f"`{node.op}` at {where(node)} ran in {node.dtype}"
        reached = upcast_reached(graph, node)
        extra: dict[str, object] = {}
        if reached is not None:
            cast, op = reached
            evidence += f"; its result reaches `{op.op}` at {where(op)}, which autocast upcast to float32"
            measured = measured_error(graph, [cast])
            if measured is not None:
                evidence += "; " + describe_error(measured)
                extra["measured"] = measured
        return Verdict(Confidence.CONFIRMED, evidence, extra)

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        def seed(node: cst.BaseExpression, flow: Flow) -> bool:
            source = _input(ctx, node)
            return source is not None and not is_fp32_value(ctx, source, flow)

        def sink(node: cst.BaseExpression, flow: Flow) -> str | None:
            if isinstance(node, cst.Call):
                qualified = ctx.qualified(node.func)
                if qualified in _SINK_FUNCTIONS:
                    return _SINK_FUNCTIONS[qualified]
                if method_call(ctx, node, _SINK_METHODS) is not None:
                    return node.func.attr.value  # type: ignore[attr-defined]
            return None

        policy = Policy(
            seed=seed,
            sink=sink,
            blocks=lambda node, flow: is_matmul(ctx, node),
            name_sink=_is_log_decay_binding,
            recurrence=True,
        )
        reported: set[cst.CSTNode] = set()
        # A finding starts at a sigmoid/tanh: only the functions that call one need the dataflow.
        seeds = [call for call in ctx.index.calls if _input(ctx, call) is not None]
        for hit in analyse_all(scopes_holding(ctx, seeds), policy):
            if hit.origin in reported:
                continue
            reported.add(hit.origin)
            assert isinstance(hit.origin, cst.Call)
            yield _finding(ctx, hit.origin, hit.kind, hit.label)


def _is_log_decay_binding(name: str, value: cst.CSTNode) -> bool:
    if _LOG_DECAY_NAME.match(name):
        return True
    return bool(_GENERIC_DECAY_NAME.match(name)) and _negates(value)


def _negates(value: cst.CSTNode) -> bool:
    """A unary minus in the arithmetic that forms the value (not inside call arguments: `dim=-1`)."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.UnaryOperation):
            if isinstance(node.operator, cst.Minus):
                return True
            stack.append(node.expression)
        elif isinstance(node, cst.BinaryOperation):
            stack.extend((node.left, node.right))
    return False


def _op_name(ctx: FileContext, call: cst.Call) -> str:
    qualified = ctx.qualified(call.func)
    if qualified in _FUNCTIONS:
        return _FUNCTIONS[qualified]
    assert isinstance(call.func, cst.Attribute)
    return call.func.attr.value


def _input(ctx: FileContext, node: cst.BaseExpression) -> cst.BaseExpression | None:
    """The tensor a sigmoid/tanh/logsigmoid call reads, or None if `node` is not such a call."""
    if not isinstance(node, cst.Call):
        return None
    if function_call(ctx, node, frozenset(_FUNCTIONS)):
        return argument(node, 0, "input")
    receiver = method_call(ctx, node, _METHODS)
    if receiver is not None and not any(arg.keyword is None for arg in node.args):
        return receiver
    return None


def _finding(ctx: FileContext, call: cst.Call, kind: str, label: str) -> Finding:
    op = _op_name(ctx, call)
    if kind == "call":
        how = f"flows into `{label}`"
    elif kind == "name":
        how = f"becomes the log-space weight `{label}`"
    else:
        how = f"decays the state `{label}` inside a loop, so rounding errors compound with every step"
    message = (
        f"`{op}` output {how} while still in the input's low-precision dtype: autocast does not "
        f"upcast `{op}`, so the value is rounded to bfloat16/float16 before anything upcasts it"
    )
    source = _input(ctx, call)
    assert source is not None
    float32, missing_import = ctx.float32()
    fixed = upcast_input(call, source, float32)
    fix = FixPlan(f"Upcast the input of `{op}` to float32", ((call, fixed),), missing_import)
    return Finding(
        call,
        message,
        fix=fix,
        help=f"upcast first: `{_short(ctx.code(fixed))}`",
        extra={"op": _TRACED_OPS.get(op, op)},
    )


def _short(code: str, limit: int = 80) -> str:
    code = " ".join(code.split())
    return code if len(code) <= limit else code[: limit - 3] + "..."
