"""AMP103: ops whose dtype under CUDA autocast differs from the dtype under CPU autocast."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from amplint.rule import GraphFinding, RuntimeRule
from amplint.runtime.chains import VIEWS, where

if TYPE_CHECKING:
    from amplint.runtime.graph import DtypeGraph, DtypeNode


class DevicePolicyDivergence(RuntimeRule):
    """
    ## What it does
    Runs on a traced dtype graph (`amplint check --confirm` traces a CUDA target under CPU autocast
    too). Finds the ops of the model whose dtype under CUDA autocast differs from their dtype under
    CPU autocast: `exp`, `log`, `pow`, `softmax`, `layer_norm`, `sum` and `cumsum` are on CUDA
    autocast's float32 list but stay bfloat16 under CPU autocast.

    ## Why is this bad?
    A test suite that runs the model under CPU autocast (CI machines have no GPU) checks numerics the
    GPU never computes: a loss that is stable on CPU can overflow on the GPU and the other way round,
    and a tolerance tuned on CPU says nothing about the training run. The ops listed are where the
    two runs part.

    ## Example
    ```python
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the test
        out = model(x)  # `exp` in bfloat16 here, in float32 under torch.autocast("cuda")
    ```

    ## Fix
    Make the precision explicit where it matters (`x.float().exp()`, `softmax(x, dim=-1,
    dtype=torch.float32)`), so that both policies compute the same thing; or check GPU numerics with
    `amplint check --confirm` (CUDA autocast emulated without a GPU).

    ## References
    - PyTorch autocast op reference, CUDA and CPU lists: https://pytorch.org/docs/stable/amp.html#autocast-op-reference
    """

    code = "AMP103"
    name = "device-policy-divergence"
    summary = (
        "ops whose dtype differs between CUDA and CPU autocast, so tests on CPU do not show GPU numerics"
    )

    @classmethod
    def check_graph(cls, graph: DtypeGraph) -> Iterator[GraphFinding]:
        if graph.device != "cuda" or not graph.cpu_dtypes:
            return
        reported: set[tuple[str, int]] = set()
        for node_id, key in graph.op_keys().items():
            node = graph.node(node_id)
            on_cpu = graph.cpu_dtypes.get(key)
            if on_cpu is None or on_cpu == node.dtype or node.source is None:
                continue
            if node.policy not in {"fp32", "fp32_set_opt_dtype", "lower_precision"}:
                continue  # follows from an op that differs, reported there
            if node.op in VIEWS or not _read(graph, node):
                continue  # a shape op, or a value nothing computes with: no number differs
            line = (node.source.path, node.source.line)
            if line in reported:
                continue
            reported.add(line)
            yield GraphFinding(
                node,
                f"`{node.op}` runs in {node.dtype} under CUDA autocast but in {on_cpu} under CPU autocast: "
                "a test on CPU does not show what the GPU computes here",
                evidence=f"`{node.op}` at {where(node)}: {node.dtype} (cuda), {on_cpu} (cpu)",
                help="make the precision explicit (`.float()` before the op, or `dtype=torch.float32`)",
                extra={"cuda_dtype": node.dtype, "cpu_dtype": on_cpu},
            )


def _read(graph: DtypeGraph, node: DtypeNode) -> bool:
    """Whether an op computes with `node`'s value (through views), not only its shape."""
    frontier, seen = [node], {node.id}
    while frontier:
        current = frontier.pop()
        for consumer in graph.consumers(current):
            if consumer.id in seen:
                continue
            seen.add(consumer.id)
            if consumer.op not in VIEWS and consumer.op not in _SHAPE_ONLY:
                return True
            frontier.append(consumer)
    return not graph.consumers(node)  # a returned value is read by the caller


# Ops that read a tensor's shape or dtype only.
_SHAPE_ONLY = frozenset({"sym_size", "size", "sym_stride", "stride", "dim", "numel", "sym_numel"})
