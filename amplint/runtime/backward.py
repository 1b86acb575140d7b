"""The backward pass of a traced forward pass (`amplint trace --backward`).

Autograd cannot run on fake `cuda:0` tensors in a CPU-only torch: it asks the device for a stream,
and such a build has no CUDA device to ask. So the forward pass and its loss are traced first, on
fake CUDA under the emulated autocast as every trace is; that graph holds each choice autocast made
as an explicit cast. The graph is then run again op by op on fake tensors of the `meta` device
(whose shape checks, unlike the CPU's, accept what CUDA kernels accept), with autocast off and the
parameters requiring gradients, and `torch.autograd.grad` of the loss is traced after it: the
forward as traced, then every derivative autograd takes of it. Autocast is off in the backward as
it is where a training loop calls `loss.backward()` after leaving the autocast block, as the
PyTorch docs ask: each backward op computes in the dtypes of what it reads, and the gradient of a
cast is cast back to the dtype its input had. Each backward op carries the source line and the
module of the forward op it differentiates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import torch
import torch.fx.traceback as fx_traceback
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from amplint.runtime.compat import FakeTensorMode, tree_leaves, tree_map
from amplint.runtime.graph import TraceError, source_of

__all__ = ["PHASE", "backward_graph", "loss_of"]

PHASE = "amplint_phase"  # the annotation that marks the backward's nodes


def loss_of(output: Any, labels: torch.Tensor | None) -> tuple[torch.Tensor, str]:
    """The loss to differentiate, and what it is in words: cross-entropy of the output's logits
    against `labels` where the logits fit them (one row of classes per label), in float32 as
    transformers' own loss computes it; else the sum of every floating-point output, its elements
    taken with alternating signs. A plain sum would have no gradient through an output that sums
    to a constant whatever the weights (a softmax, a normalisation at its initial weights)."""
    logits = _logits(output)
    if labels is not None and logits is not None and tuple(logits.shape[:-1]) == tuple(labels.shape):
        classes = logits.shape[-1]
        loss = F.cross_entropy(logits.float().reshape(-1, classes), labels.reshape(-1))
        return (
            loss,
            f"cross-entropy of the logits against random labels over {classes} classes, mean over {labels.numel()} positions",
        )
    floating = [t for t in tree_leaves(output) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not floating:
        raise TraceError("--backward: the model returns no floating-point tensor to differentiate")
    loss = torch.stack([_alternating(t.float().reshape(-1)).sum() for t in floating]).sum()
    return loss, "the sum of the outputs with alternating signs (x0 - x1 + x2 - ..., float32)"


def _alternating(flat: torch.Tensor) -> torch.Tensor:
    signs = 1 - 2 * (torch.arange(flat.numel(), device=flat.device) % 2)
    return flat * signs


def _logits(output: Any) -> torch.Tensor | None:
    logits = output.get("logits") if isinstance(output, Mapping) else getattr(output, "logits", None)
    return logits if isinstance(logits, torch.Tensor) and logits.dim() >= 2 else None


def backward_graph(
    forward: torch.fx.GraphModule, inputs: Sequence[Any], trainable: Mapping[str, int]
) -> tuple[torch.fx.GraphModule, dict[str, torch.fx.Node]]:
    """The graph of `forward` (whose first output is the loss) followed by the loss's backward, and
    the node of each parameter's gradient. `inputs`: the forward's inputs (fake tensors and plain
    values) in its placeholders' order; `trainable`: the position there of each parameter to
    differentiate, by name."""
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        leaves = [_leaf(value, requires_grad=i in trainable.values()) for i, value in enumerate(inputs)]

    def joint(*values: Any) -> tuple[list[Any], dict[str, torch.Tensor]]:
        with torch.enable_grad():
            outputs = _Rerun(forward).run(*values)
            names = list(trainable)
            with fx_traceback.annotate({PHASE: "backward"}):
                grads = torch.autograd.grad(
                    outputs[0], [values[trainable[n]] for n in names], allow_unused=True
                )
        return outputs, {name: g for name, g in zip(names, grads, strict=True) if g is not None}

    with fx_traceback.preserve_node_meta():
        try:
            # An explicit (empty) decomposition table: without one, make_fx since torch 2.14
            # records `detach` as `alias`, and the graph would not be the ops a real run dispatches.
            graph_module = make_fx(joint, tracing_mode="fake", decomposition_table={})(*leaves)
        except TraceError:
            raise
        except Exception as exc:  # in a derivative: the last prehook named the op it belongs to
            stack = fx_traceback.get_current_meta().get("stack_trace")
            raise TraceError(_explain("the backward pass", stack, exc)) from exc
    # The output node holds what `joint` returned: the forward's outputs, the gradients by name.
    _, found = cast(tuple[Any, dict[str, torch.fx.Node]], graph_module.graph.output_node().args[0])
    return graph_module, dict(found)


def _on_meta(value: Any) -> Any:
    return torch.device("meta") if isinstance(value, torch.device) else value


def _leaf(value: Any, requires_grad: bool) -> Any:
    if not isinstance(value, torch.Tensor):
        return value
    tensor = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    return tensor.requires_grad_(requires_grad and tensor.is_floating_point())


class _Rerun(torch.fx.Interpreter):
    """Runs the forward graph's ops on the meta device, each under its node's metadata (source, module,
    annotations), and hooks every autograd node an op makes so that the backward ops that node
    runs get the metadata of the op it differentiates."""

    def __init__(self, module: torch.fx.GraphModule) -> None:
        super().__init__(module)
        self._hooked: set[Any] = set()

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        args, kwargs = tree_map(_on_meta, (args, kwargs))
        first = args[0] if args else None
        schema = getattr(target, "_schema", None)
        if (
            schema is not None
            and schema.is_mutable
            and isinstance(first, torch.Tensor)
            and first.is_leaf
            and first.requires_grad
        ):
            # An in-place change of a parameter (RWKV rescales its weights in eval): eager autograd
            # allows it only under no_grad, so the model made it there, and it has no gradient.
            with torch.no_grad():
                return target(*args, **kwargs)
        return target(*args, **kwargs)

    def run_node(self, n: torch.fx.Node) -> Any:
        try:
            result = super().run_node(n)
        except Exception as exc:
            what = f"`{getattr(n.target, '__name__', n.target)}` again for the backward pass"
            raise TraceError(_explain(what, n.meta.get("stack_trace"), exc)) from exc
        for value in tree_leaves(result):
            function = getattr(value, "grad_fn", None) if isinstance(value, torch.Tensor) else None
            if function is not None and function not in self._hooked:
                self._hooked.add(function)
                stack, custom = n.meta.get("stack_trace"), n.meta.get("custom") or {}
                function.register_prehook(_entering(stack, custom.get("amplint_module")))
                function.register_hook(_leaving)
        return result


def _entering(stack: str | None, module: str | None) -> Callable[[Any], None]:
    def prehook(grad_outputs: Any) -> None:
        meta = fx_traceback.get_current_meta()
        if stack:
            meta["stack_trace"] = stack
        else:
            meta.pop("stack_trace", None)
        meta["custom"] = {PHASE: "backward", **({"amplint_module": module} if module else {})}

    return prehook


def _leaving(grad_inputs: Any, grad_outputs: Any) -> None:
    # What runs between two autograd nodes (the sum of a value's gradients from its several uses)
    # belongs to no single forward op.
    meta = fx_traceback.get_current_meta()
    meta.pop("stack_trace", None)
    meta["custom"] = {PHASE: "backward"}


def _explain(what: str, stack: str | None, exc: Exception) -> str:
    """Why the backward could not be traced, with the line of the forward op it was at."""
    source = source_of(stack)
    where = f" (the op at {source.path}:{source.line})" if source else ""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"cannot trace {what}{where}: {type(exc).__name__}: {first}"
