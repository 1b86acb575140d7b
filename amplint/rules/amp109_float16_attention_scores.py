"""AMP109: attention scores formed in float16 on the traced graph (case 2, and case 3 on old GPUs)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from amplint.rule import GraphFinding, RuntimeRule
from amplint.runtime.chains import where
from amplint.runtime.value_walks import softmax_reading

if TYPE_CHECKING:
    from amplint.runtime.graph import DtypeGraph

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
            if softmax is None or key in reported:
                continue
            reported.add(key)
            yield GraphFinding(
                node,
                f"attention scores are formed in float16 by `{node.op}` and reach `{softmax.op}` at "
                f"{where(softmax)}: a score past 65504 becomes inf, and softmax turns it into NaN",
                evidence=f"`{node.op}` at {where(node)} produced float16 {node.shape or ''}".rstrip(),
                help="use a fused attention kernel (scaled_dot_product_attention), or form the scores in "
                "float32 (`torch.matmul(q.float(), k.float().transpose(-1, -2))`)",
            )
