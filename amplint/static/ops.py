"""What PyTorch does to the dtype of each op the engine models, as data: the CUDA and CPU autocast
policies (torch 2.13's `AutocastCUDA`/`AutocastCPU` kernels; `tests/static/test_ops.py` checks these
tables against the dispatcher of the installed torch), the casts, the factories, and the ops whose
result is not a floating tensor.

Names are aten-style op names: `torch.exp(x)`, `x.exp()` and `F.softplus(x)` all look up `exp` /
`softplus`.
"""

from __future__ import annotations

F64, F32, BF16, F16 = "float64", "float32", "bfloat16", "float16"
HALF = frozenset({BF16, F16})
FLOATS = (F64, F32, BF16, F16)

# Ops that autocast runs in its low dtype (`lower_precision_fp`), per device.
_LOWER_COMMON = frozenset(
    {
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "bmm",
        "mm",
        "baddbmm",
        "addmm",
        "addbmm",
        "linear",
        "matmul",
        "prelu",
        "scaled_dot_product_attention",
    }
)
# einsum has an AutocastCUDA kernel, which lowers it whatever its equation, and no AutocastCPU one:
# under CPU autocast it runs as what it decomposes to (`einsum_runs_as`).
CUDA_LOWER = _LOWER_COMMON | {"addmv", "addr", "mv", "chain_matmul", "multi_dot", "conv_tbc", "einsum"}
CPU_LOWER = _LOWER_COMMON | {"conv_tbc"}
# Ops whose tensor operands must share one dtype outside autocast (`mm`: "expected m1 and m2 to have
# the same dtype"): code that runs passes them in the same dtype.
SAME_DTYPE = CUDA_LOWER | CPU_LOWER


def same_dtype(op: str) -> bool:
    return ALIASES.get(op, op) in SAME_DTYPE


# Ops that autocast runs in float32, whatever their input (`fp32`).
CUDA_FP32 = frozenset(
    {
        "acos",
        "asin",
        "cosh",
        "erfinv",
        "exp",
        "expm1",
        "log",
        "log10",
        "log2",
        "log1p",
        "reciprocal",
        "rsqrt",
        "sinh",
        "tan",
        "pow",
        "softplus",
        "layer_norm",
        "group_norm",
        "rms_norm",
        "norm",
        "cosine_similarity",
        "poisson_nll_loss",
        "cosine_embedding_loss",
        "nll_loss",
        "hinge_embedding_loss",
        "kl_div",
        "l1_loss",
        "smooth_l1_loss",
        "huber_loss",
        "mse_loss",
        "margin_ranking_loss",
        "multilabel_margin_loss",
        "soft_margin_loss",
        "triplet_margin_loss",
        "multi_margin_loss",
        "binary_cross_entropy_with_logits",
        "dist",
        "pdist",
        "cdist",
        "renorm",
        "logsumexp",
        "softmax",
        "log_softmax",
        "cumprod",
        "cumsum",
        "prod",
        "sum",
    }
)
CPU_FP32 = frozenset(
    {
        "prod",
        "cdist",
        "mse_loss",
        "nll_loss",
        "kl_div",
        "l1_loss",
        "smooth_l1_loss",
        "huber_loss",
        "margin_ranking_loss",
        "soft_margin_loss",
        "triplet_margin_loss",
        "multi_margin_loss",
        "hinge_embedding_loss",
        "cosine_embedding_loss",
        "poisson_nll_loss",
        "binary_cross_entropy",
        "binary_cross_entropy_with_logits",
        "multilabel_margin_loss",
    }
)
# Ops that autocast runs in the widest dtype of their inputs (`promote`).
PROMOTE = frozenset({"addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "index_put", "scatter_add"})

# Torch names whose aten op has another name.
ALIASES = {
    "tensordot": "mm",
    "__matmul__": "matmul",
    "__pow__": "pow",
    "__rpow__": "pow",
    "__rtruediv__": "reciprocal",
    "special_expit": "sigmoid",
    "expit": "sigmoid",
    "logsigmoid": "log_sigmoid",
    "softmin": "softmax",
    "normalize": "norm",
    "vector_norm": "norm",
    "cross_entropy": "nll_loss",
}


def einsum_runs_as(equation: str | None) -> str:
    """The op an einsum decomposes to, which CPU autocast (it has no einsum kernel) sees: `bmm` where
    the equation sums over an index or is not known, a broadcast `mul` where it sums over none (an
    outer product, `i,j->ij`: float32 stays float32 under CPU autocast). CUDA autocast lowers the
    einsum itself, outer products too."""
    return "mul" if equation is not None and not einsum_contracts(equation) else "bmm"


def einsum_contracts(equation: str) -> bool:
    """Whether an einsum equation sums over an index (`...qd,...kd->...qk`)."""
    inputs, arrow, output = equation.replace(" ", "").replace("...", "").partition("->")
    letters = [c for c in inputs if c.isalpha()]
    if not arrow:  # implicit output: the indices that appear once
        return any(letters.count(c) > 1 for c in letters)
    return any(c not in output for c in letters)


# Casts that set the dtype outright.
CAST_METHODS = {"float": F32, "double": F64, "half": F16, "bfloat16": BF16}
# Factories whose result has the default dtype (float32) unless `dtype=` says otherwise.
FLOAT_FACTORIES = frozenset(
    {"zeros", "ones", "empty", "rand", "randn", "linspace", "logspace", "eye", "full", "tensor", "as_tensor"}
)
# Factories that copy the dtype of their first argument (or of the receiver, for `new_*`).
LIKE_FACTORIES = frozenset(
    {"zeros_like", "ones_like", "empty_like", "rand_like", "randn_like", "full_like", "clone"}
)
NEW_FACTORIES = frozenset({"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor"})
# Results that are integers or booleans: they never promote a floating operand.
INTEGER_OPS = frozenset(
    {
        "argmax",
        "argmin",
        "argsort",
        "nonzero",
        "long",
        "int",
        "bool",
        "short",
        "byte",
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "isnan",
        "isinf",
        "isfinite",
        "isneginf",
        "isposinf",
        "logical_and",
        "logical_or",
        "logical_not",
        "logical_xor",
        "multinomial",
        "randint",
        "randperm",
        "searchsorted",
        "bucketize",
        "any",
        "all",
        "tril_indices",
        "triu_indices",
        "arange",  # float only when given a float: see `dtypes`
    }
)
# Methods whose result is a Python value, not a tensor.
SCALAR_METHODS = frozenset(
    {"size", "dim", "numel", "item", "tolist", "data_ptr", "stride", "element_size", "nelement", "ndimension"}
)
TENSOR_ATTRIBUTES_SCALAR = frozenset({"shape", "ndim", "is_cuda", "requires_grad", "layout", "device"})
# Methods that rearrange a tensor's elements: the result has the receiver's dtype, whatever their
# other arguments (sizes, dims, a tensor whose shape is borrowed).
LAYOUT_METHODS = frozenset(
    {
        "view",
        "view_as",
        "reshape",
        "reshape_as",
        "expand",
        "expand_as",
        "permute",
        "transpose",
        "flatten",
        "unflatten",
        "unsqueeze",
        "squeeze",
        "repeat",
        "repeat_interleave",
        "tile",
        "narrow",
        "unfold",
        "movedim",
        "flip",
        "roll",
        "contiguous",
    }
)

# Methods of a module that return the module itself, its dtype unchanged (`model.cuda().train()`).
MODULE_KEEPING_METHODS = frozenset(
    {"cuda", "cpu", "train", "eval", "requires_grad_", "share_memory", "to_empty", "xpu", "npu"}
)
# Methods of a module whose result are its parameters, in its dtype.
PARAMETER_METHODS = frozenset({"parameters", "named_parameters"})

# Submodules by constructor name: what autocast does to their forward.
MODULE_OPS = {
    "Linear": "linear",
    "LazyLinear": "linear",
    "Conv1d": "conv1d",
    "Conv2d": "conv2d",
    "Conv3d": "conv3d",
    "ConvTranspose1d": "conv_transpose1d",
    "ConvTranspose2d": "conv_transpose2d",
    "ConvTranspose3d": "conv_transpose3d",
    "Bilinear": "bilinear",
    "LayerNorm": "layer_norm",
    "GroupNorm": "group_norm",
    "RMSNorm": "rms_norm",
    "Softmax": "softmax",
    "LogSoftmax": "log_softmax",
    "Softplus": "softplus",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
}


def autocast_policy(op: str, device: str) -> str | None:
    """`lower`, `fp32` or `promote` for an op autocast on `device` casts, None for one it leaves."""
    op = ALIASES.get(op, op)
    lower, fp32 = (CUDA_LOWER, CUDA_FP32) if device == "cuda" else (CPU_LOWER, CPU_FP32)
    if op in lower:
        return "lower"
    if op in fp32:
        return "fp32"
    return "promote" if op in PROMOTE else None
