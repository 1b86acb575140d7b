"""AMP104: bfloat16 and float16 values meeting in one op, or a product given two dtypes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from amplint.rule import GraphFinding, RuntimeRule
from amplint.runtime.chains import where
from amplint.runtime.graph import FLOATING

if TYPE_CHECKING:
    from amplint.runtime.graph import DtypeGraph, DtypeNode


# Ops that refuse operands of two dtypes on a real device (a trace on fake tensors lets them through).
_PRODUCTS = frozenset(
    {
        "mm",
        "bmm",
        "addmm",
        "baddbmm",
        "addbmm",
        "addmv",
        "mv",
        "dot",
        "convolution",
        "index_put",
        "index_put_",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_attention_math",
    }
)


class AutocastDtypeMixing(RuntimeRule):
    """
    ## What it does
    Runs on a traced dtype graph (`amplint check --confirm`, `amplint trace`). Finds ops that read
    both bfloat16 and float16 tensors: a model cast with `.half()` fed by code that still produces
    bfloat16 (a cached rotary table, a buffer, a `torch_dtype` given to one part only), or two
    autocast regions with different dtypes whose results meet. Outside autocast, it also finds a
    product (`mm`, `addmm`, `bmm`, convolution, attention) given operands of any two floating dtypes:
    an upcast to float32 whose result reaches a bf16 `nn.Linear`.

    ## Why is this bad?
    Neither dtype holds the other: type promotion turns the pair into float32, silently, in pointwise
    ops, and a matmul, `bmm`, `index_put_` or a fused kernel given the pair raises "expected both
    inputs to have the same dtype" at run time, on the GPU, far from where the second dtype came in.
    A trace on fake tensors does not raise there; this rule says where a real run will.

    ## Example
    ```python
    model = model.half()
    cos = self.cos_cached.to(torch.bfloat16)  # a bf16 table in an fp16 model
    q = q * cos  # bf16 x fp16: promoted to float32
    ```

    ## Fix
    Cast to the dtype of the tensor you combine with: `self.cos_cached.to(q.dtype)`.

    ## References
    - PyTorch type promotion: https://pytorch.org/docs/stable/tensor_attributes.html#type-promotion-doc
    """

    code = "AMP104"
    name = "autocast-dtype-mixing"
    summary = (
        "bfloat16 and float16 meeting in one op (promoted to float32), or a matmul given two dtypes (raises)"
    )

    @classmethod
    def check_graph(cls, graph: DtypeGraph) -> Iterator[GraphFinding]:
        reported: set[tuple[str, int]] = set()
        for node in graph.nodes:
            dtypes = {dtype for dtype in node.input_dtypes if dtype is not None}
            product = node.op in _PRODUCTS
            mixed = len(dtypes & FLOATING) > 1 if product else {"bfloat16", "float16"} <= dtypes
            if not mixed or node.source is None:
                continue
            key = (node.source.path, node.source.line)
            if key in reported:
                continue
            reported.add(key)
            producers = [graph.node(i) for i in node.inputs]
            origins = "; ".join(dict.fromkeys(_origin(graph, p) for p in producers if p.dtype in FLOATING))
            if product:
                names = " and ".join(sorted(dtypes & FLOATING))
                message = (
                    f"`{node.op}` is given {names} operands ({origins}): it raises at run time on a "
                    "real device (a product needs one dtype)"
                )
            else:
                message = (
                    f"`{node.op}` reads both bfloat16 and float16 ({origins}): type promotion makes it "
                    "float32, silently"
                )
            yield GraphFinding(
                node,
                message,
                evidence=f"`{node.op}` at {where(node)} read {', '.join(d or '-' for d in node.input_dtypes)}",
                help="cast one side to the other's dtype (`x.to(y.dtype)`)",
            )


def _origin(graph: DtypeGraph, producer: DtypeNode) -> str:
    """Where an operand's dtype came from: the op and its line, or the parameter or input it is."""
    if producer.policy != "input":
        return f"{producer.dtype} from `{producer.op}` at {where(producer)}"
    name = next((name for name, i in graph.parameters.items() if i == producer.id), None)
    if name is not None:
        return f"{producer.dtype} from the parameter `{name}`"
    return f"{producer.dtype} from an input of the traced call (an argument or a buffer)"
