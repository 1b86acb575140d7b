"""AMP109: attention scores formed in float16 on the traced graph (case 2, and case 3 on old GPUs)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from amplint.rule import GraphFinding, RuntimeRule
from amplint.runtime.chains import where
from amplint.runtime.value_walks import softmax_reading

if TYPE_CHECKING:
    from amplint.runtime.graph import DtypeGraph, DtypeNode

IN_FLOAT16: Mapping[str, object] = MappingProxyType({"dtype": "float16"})


class Float16AttentionScores(RuntimeRule):
    """
    ## What it does
    Runs on a traced dtype graph (`amplint check --confirm`, `amplint trace`). Finds batched
    products (`bmm`, `baddbmm`: `q @ k.transpose(-1, -2)` on 3-d or 4-d tensors) whose output is
    float16 and that a softmax reads within a few ops (scaling, masking, reshapes): attention scores
    formed in float16, as eager attention forms them when a model runs in float16, or when
    `amplint trace --gpu v100` traces the float16 run a GPU without bfloat16 gets. Fused attention kernels (flash, memory-efficient, cuDNN) keep their scores in
    float32 and are not flagged.

    ## Why is this bad?
    float16's largest finite value is 65504. `Q @ K^T` over a 128-wide head, on the activations of a
    model trained in bfloat16 (whose range is float32's), exceeds it on long inputs: the score
    becomes inf, softmax turns inf - inf into NaN, and generation degenerates into repeated tokens
    (Qwen2-7B in float16 with eager attention). Autocast's float32 softmax comes too late: the
    overflow happened in the product. Scaling after the product does not help either.

    ## Example
    ```python
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(head_dim)  # float16 under fp16 autocast
    probs = scores.softmax(-1)
    ```

    ## Fix
    Use a fused kernel (`F.scaled_dot_product_attention`, `attn_implementation="sdpa"` in
    transformers), or form the scores in float32:
    `torch.matmul(q.float(), k.float().transpose(-1, -2))`; keep bfloat16 where the GPU has it.

    ## References
    - Qwen2-7B-Instruct in float16: eager attention overflows in `Q @ K^T` and emits "!", flash-attn2
      and SDPA do not: https://github.com/QwenLM/Qwen3/issues/910
    - perplexity NaN with eager attention in float16, 7.14 with SDPA:
      https://github.com/huggingface/transformers/pull/33317
    """

    code = "AMP109"
    name = "float16-attention-scores"
    summary = "attention scores formed in float16 (largest value 65504) before softmax: inf, then NaN"
    example_trace = IN_FLOAT16

    @classmethod
    def check_graph(cls, graph: DtypeGraph) -> Iterator[GraphFinding]:
        reported: set[tuple[str, int]] = set()
        for node in graph.nodes:
            # A batched product of two activations (a linear layer's is an `mm`) read by a softmax.
            if node.op not in {"bmm", "baddbmm"} or node.dtype != "float16" or node.source is None:
                continue
            softmax = softmax_reading(graph, node)
            key = (node.source.path, node.source.line)
            if softmax is None or key in reported or _measured_clear(graph, node):
                continue
            reported.add(key)
            yield GraphFinding(
                node,
                f"attention scores are formed in float16 by `{node.op}` and reach `{softmax.op}` at "
                f"{where(softmax)}: a score past 65504 becomes inf, and softmax turns it into NaN",
                evidence=f"`{node.op}` at {where(node)} produced float16 {node.shape or ''}".rstrip(),
                help=_help(graph, node),
            )


def _measured_clear(graph: DtypeGraph, node: DtypeNode) -> bool:
    """Whether the values replay (`--values`) measured these scores far from float16's limit: at
    least the headroom AMP106 asks for, and nothing overflowed. The measurement beats the dtype
    alone; a score that nears the limit is AMP106's (or AMP105's once it overflows)."""
    values = graph.values
    measured = values.nodes.get(node.id) if values is not None else None
    if values is None or measured is None or measured.headroom is None:
        return False
    return measured.headroom >= values.limits.headroom_bits and measured.overflow == 0 and measured.inf == 0


def _help(graph: DtypeGraph, node: DtypeNode) -> str:
    """The changes that keep these scores out of float16, as they fit the trace: a transformers
    model's fused attention by name; `.float()` only where autocast does not cast the operands down
    again (where it does, autocast off around the product); bfloat16, which has float32's range."""
    source = node.source.path.replace("\\", "/") if node.source is not None else ""
    fused = (
        'load the model with `attn_implementation="sdpa"` (the fused kernel keeps the scores in float32)'
        if "/transformers/models/" in source
        else "use a fused attention kernel (`torch.nn.functional.scaled_dot_product_attention`)"
    )
    if node.policy == "lower_precision":  # autocast picked the product's dtype, whatever it reads
        product = (
            'form the scores with autocast off around the product (`with torch.autocast("cuda", '
            "enabled=False):` and `q.float() @ k.float().transpose(-1, -2)`; under autocast `.float()` "
            "is cast back to float16)"
        )
    else:
        product = "form the scores in float32 (`torch.matmul(q.float(), k.float().transpose(-1, -2))`)"
    return f"{fused}, {product}, or run in bfloat16 instead of float16"
