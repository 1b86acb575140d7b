"""Replaying a traced graph on CPU with real tensors: what the error measurements
(`amplint.runtime.measure`) and the values replay (`amplint.runtime.values`) share.

The graph is run node by node in the dtypes the trace recorded (autocast's casts are explicit
nodes, so CUDA autocast's choices replay as made). Device arguments are mapped to the CPU, and the
fused attention kernels that only CUDA builds have are run as the math they compute: scores in
float32 from the half inputs, the output rounded to the input dtype, as the fused kernels do; cuDNN's
grid sampler runs as the CPU's, with the modes it stands for.
A node can also be evaluated again with its floating-point values converted to another dtype (a
float64 reference, a float32 fix), its dtype arguments included: a cast to half becomes a cast to
that dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

import torch

from amplint.runtime.compat import tree_leaves, tree_map

aten = torch.ops.aten

# Below this fraction of the largest reference value, the element-wise relative error is taken
# against that floor (a value that is nearly zero would make any rounding look infinite).
FLOOR = 1e-6
# Errors are kept finite so that they serialise as JSON numbers.
_LARGEST = 1e300


class Replay(torch.fx.Interpreter):
    """Runs a traced graph on CPU. Values are freed after their last use (the Interpreter's
    garbage collection), so memory holds the weights and the activations still to be read."""

    def call(self, n: torch.fx.Node, args: Any, kwargs: Any) -> Any:
        """The node's op applied to `args` and `kwargs`, on CPU."""
        args, kwargs = tree_map(on_cpu, (args, kwargs))
        standin = _CPU_STANDINS.get(n.target)
        if standin is None:
            return cast(Callable[..., Any], n.target)(*args, **kwargs)
        # The traced views after a fused kernel rely on the memory layout it writes.
        return _laid_out(standin(*args, **kwargs), n.meta.get("val"))

    def converted(
        self,
        n: torch.fx.Node,
        dtype: torch.dtype | None,
        values: Mapping[torch.fx.Node, Any] | None = None,
    ) -> tuple[Any, Any]:
        """The node's arguments taken from `values` where it holds them (from the replay's own values
        otherwise), every floating-point tensor converted to `dtype` and every floating-point dtype
        argument replaced by it; with `dtype` None, each tensor is converted to the dtype of the
        replay's own value of that argument (a reference rounded to the traced dtypes)."""
        values = values or {}

        def value(argument: Any) -> Any:
            if isinstance(argument, torch.fx.Node):
                current = values[argument] if argument in values else self.env[argument]
                if isinstance(current, torch.Tensor) and current.is_floating_point():
                    return current.to(self.env[argument].dtype if dtype is None else dtype)
                return current
            if dtype is not None and isinstance(argument, torch.dtype) and argument.is_floating_point:
                return dtype
            return on_cpu(argument)

        return torch.fx.node.map_aggregate(n.args, value), torch.fx.node.map_aggregate(n.kwargs, value)


class _Outputs(Replay):
    def run_node(self, n: torch.fx.Node) -> Any:
        if n.op != "call_function":
            return super().run_node(n)
        return self.call(n, *self.fetch_args_kwargs_from_env(n))


def replay_outputs(graph_module: torch.fx.GraphModule, inputs: Any) -> Any:
    """What `graph_module` returns, replayed on CPU on `inputs` (real tensors in the structure the
    graph was traced with)."""
    with torch.no_grad():
        return _Outputs(graph_module).run(*tree_leaves(inputs))


def on_cpu(value: Any) -> Any:
    if isinstance(value, torch.device) and value.type != "cpu":
        return torch.device("cpu")
    return value


def relative_errors(value: torch.Tensor, reference: torch.Tensor) -> tuple[float, float]:
    """The largest and the mean element-wise relative error against the reference, from one error
    tensor; below `FLOOR` times the largest reference value, that value is the scale."""
    value, reference = value.to(torch.float64), reference.to(torch.float64)
    scale = reference.abs()
    floor = FLOOR * float(scale.max()) if scale.numel() else 0.0
    error = (value - reference).abs() / scale.clamp_min(max(floor, 1e-300))
    if not error.numel():
        return 0.0, 0.0
    return min(float(error.max()), _LARGEST), min(float(error.mean()), _LARGEST)


def _math_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
) -> torch.Tensor:
    """A fused attention kernel's output: scores and softmax in float32 (float64 for a float64
    reference), the output in the input dtype."""
    inner = torch.float64 if query.dtype == torch.float64 else torch.float32
    mask = attn_mask.to(inner) if attn_mask is not None and attn_mask.is_floating_point() else attn_mask
    if key.shape[1] != query.shape[1]:  # grouped-query attention: the kernels broadcast the heads
        repeats = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(repeats, 1), value.repeat_interleave(repeats, 1)
    output = aten._scaled_dot_product_attention_math.default(
        query.to(inner), key.to(inner), value.to(inner), mask, dropout_p, is_causal, scale=scale
    )[0]
    return output.to(query.dtype)


def _flash(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    return_debug_mask: bool = False,
    *,
    scale: float | None = None,
) -> tuple[Any, ...]:
    output = _math_attention(query, key, value, None, dropout_p, is_causal, scale)
    return (output, *([None] * 8))  # the statistics the fused backward reads: its stand-in recomputes


def _efficient(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_bias: torch.Tensor | None,
    compute_log_sumexp: bool,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    scale: float | None = None,
) -> tuple[Any, ...]:
    return (_math_attention(query, key, value, attn_bias, dropout_p, is_causal, scale), None, None, None)


def _cudnn(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_bias: torch.Tensor | None,
    compute_log_sumexp: bool,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    return_debug_mask: bool = False,
    *,
    scale: float | None = None,
) -> tuple[Any, ...]:
    return (_math_attention(query, key, value, attn_bias, dropout_p, is_causal, scale), *([None] * 8))


def _attention_gradients(
    grad_out: torch.Tensor,
    inputs: tuple[torch.Tensor, ...],
    mask: torch.Tensor | None,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
) -> tuple[torch.Tensor, ...]:
    """What a fused kernel's backward computes: the gradients of `inputs` (query, key, value and,
    when it is among them, the additive mask) through the math it runs forward, in float32 for half
    inputs, each written back in its input's dtype."""
    leaves = tuple(t.detach().requires_grad_() for t in inputs)
    query, key, value = leaves[:3]
    bias = leaves[3] if len(leaves) > 3 else mask
    with torch.enable_grad():
        output = _math_attention(query, key, value, bias, dropout_p, is_causal, scale)
        return torch.autograd.grad(output, leaves, grad_out.to(output.dtype))


def _flash_backward(
    grad_out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *rest: Any,
    scale: float | None = None,
) -> tuple[torch.Tensor, ...]:
    # After `out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k`: what the math needs.
    dropout_p, is_causal = rest[6], rest[7]
    return _attention_gradients(grad_out, (query, key, value), None, dropout_p, is_causal, scale)


def _efficient_backward(
    grad_out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_bias: torch.Tensor | None,
    out: torch.Tensor,
    logsumexp: Any,
    philox_seed: Any,
    philox_offset: Any,
    dropout_p: float,
    grad_input_mask: list[bool],
    is_causal: bool = False,
    *,
    scale: float | None = None,
) -> tuple[Any, ...]:
    wants_bias = attn_bias is not None and attn_bias.is_floating_point() and grad_input_mask[3]
    inputs = (query, key, value, *((attn_bias,) if wants_bias and attn_bias is not None else ()))
    grads = _attention_gradients(grad_out, inputs, attn_bias, dropout_p, is_causal, scale)
    return (*grads[:3], grads[3] if wants_bias else None)


def _cudnn_backward(
    grad_out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    *rest: Any,
    scale: float | None = None,
) -> tuple[torch.Tensor, ...]:
    # After `out, logsumexp, philox_seed, philox_offset`: the mask, then after `cum_seq_q,
    # cum_seq_k, max_q, max_k` the dropout and causality.
    attn_bias, dropout_p, is_causal = rest[4], rest[9], rest[10]
    return _attention_gradients(grad_out, (query, key, value), attn_bias, dropout_p, is_causal, scale)


def _softmax(value: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    # CUDA's softmax reads half and writes float32 in one kernel; CPU's needs the input upcast first.
    return aten._softmax.default(value.float() if half_to_float else value, dim, False)


def _log_softmax(value: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    return aten._log_softmax.default(value.float() if half_to_float else value, dim, False)


# cuDNN's grid sampler is the one `grid_sampler` picks for bilinear, zeros padding and aligned corners.
_BILINEAR, _ZEROS, _ALIGNED = 0, 0, True


def _cudnn_grid_sampler(image: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    return aten.grid_sampler_2d.default(image, grid, _BILINEAR, _ZEROS, _ALIGNED)


def _cudnn_grid_sampler_backward(
    image: torch.Tensor, grid: torch.Tensor, grad_output: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    both = [True, True]
    return aten.grid_sampler_2d_backward.default(grad_output, image, grid, _BILINEAR, _ZEROS, _ALIGNED, both)


_CPU_STANDINS: dict[Any, Callable[..., Any]] = {
    aten._scaled_dot_product_flash_attention.default: _flash,
    aten._scaled_dot_product_efficient_attention.default: _efficient,
    aten._scaled_dot_product_cudnn_attention.default: _cudnn,
    aten._scaled_dot_product_flash_attention_backward.default: _flash_backward,
    aten._scaled_dot_product_efficient_attention_backward.default: _efficient_backward,
    aten._scaled_dot_product_cudnn_attention_backward.default: _cudnn_backward,
    aten._softmax.default: _softmax,
    aten._log_softmax.default: _log_softmax,
    aten.cudnn_grid_sampler.default: _cudnn_grid_sampler,
    aten.cudnn_grid_sampler_backward.default: _cudnn_grid_sampler_backward,
}


def _laid_out(result: Any, traced: Any) -> Any:
    """`result` with each tensor in the strides of the traced value it stands for."""
    if isinstance(result, tuple) and isinstance(traced, (tuple, list)) and len(result) == len(traced):
        return tuple(_laid_out(value, like) for value, like in zip(result, traced, strict=True))
    if (
        isinstance(result, torch.Tensor)
        and isinstance(traced, torch.Tensor)
        and result.shape == traced.shape
        and result.stride() != traced.stride()
    ):
        return torch.empty_strided(traced.shape, traced.stride(), dtype=result.dtype).copy_(result)
    return result


def first_tensor(value: Any) -> Any:
    """The primary output of an op with several (attention's output, layer_norm's result)."""
    if isinstance(value, (tuple, list)):
        return next((v for v in value if isinstance(v, torch.Tensor)), None)
    return value
