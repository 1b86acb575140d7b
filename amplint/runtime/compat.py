"""Every private torch name the runtime pass uses, and every torch internal it patches, in one place.

torch gives no public API yet for what a trace on fake CUDA tensors needs; each entry below says
what it stands for and the public alternative it waits for. When torch changes one of these, this
is the only module to change (`tests/test_architecture.py` checks that no other module names a
private torch name), and `benchmarks/version_matrix.py` shows on which versions they still hold.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import torch

# FakeTensorMode's first construction imports torch._dynamo (and sympy with it), about as long as
# torch's own import: imported with this module instead, so that the process traces are forked
# from (`amplint.runtime.child`) imports it once, not each trace.
import torch._dynamo
from torch import nn

# The types of `torch.ops.aten.<op>` and `torch.ops.aten.<op>.<overload>`. Waits for: public
# names for them (`torch.ops` gives the objects, not their types).
from torch._ops import OpOverload, OpOverloadPacket

# Fake tensors: a trace runs the model on tensors with a device and a dtype and no data.
# Waits for: a public fake-tensor module (torch documents FakeTensorMode only under
# `torch._subclasses`).
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
)

# Dispatch modes: the oracle and the parity recorder see each aten op with its real output.
# Waits for: `TorchDispatchMode` exported from a public module, as `TorchFunctionMode` is from
# `torch.overrides`; `disable_current_modes` has no public counterpart.
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._python_dispatch import _disable_current_modes as disable_current_modes

# Nested containers of tensors (a model's inputs and outputs). Waits for: `torch.utils.pytree`
# (proposed as the public module; not in torch 2.13).
from torch.utils._pytree import tree_flatten, tree_leaves, tree_map, tree_unflatten

# Where a tensor method's function object lives (`Tensor.to` is TensorBase's, the C++ binding a
# fake CUDA tensor on a CPU-only build must go around). Waits for: nothing public names it.
TensorBase = torch._C.TensorBase

# Runs a block with `__torch_function__` off. Waits for: a public context manager (torch's own is
# `torch._C.DisableTorchFunction`).
DisableTorchFunction = torch._C.DisableTorchFunction

# The module of torch's C++ bindings, which a function's `__module__` names for torch's own ops.
C_MODULE = "torch._C"

# The logger of fake-tensor kernels, which logs a whole traceback for each kernel that raises.
FAKE_TENSOR_LOGGER = "torch._subclasses.fake_tensor"

__all__ = [
    "C_MODULE",
    "FAKE_TENSOR_LOGGER",
    "DataDependentOutputException",
    "DisableTorchFunction",
    "DynamicOutputShapeException",
    "FakeTensor",
    "FakeTensorMode",
    "OpOverload",
    "OpOverloadPacket",
    "TensorBase",
    "TorchDispatchMode",
    "active_fake_mode",
    "amp_always_available",
    "buffers_table",
    "check",
    "convert",
    "destroy_library",
    "disable_current_modes",
    "has_kernel_for",
    "meta_grouped_mm",
    "module_apply",
    "non_persistent_buffers",
    "original_tensor_checks",
    "parameters_table",
    "patch_module_apply",
    "patch_tensor_checks",
    "patch_traceback_filter",
    "sdp_priority_order",
    "tree_flatten",
    "tree_leaves",
    "tree_map",
    "tree_unflatten",
]


def active_fake_mode() -> Any:
    """The FakeTensorMode on the dispatch mode stack, or None. Waits for: a public query of the
    mode stack (`torch._guards.detect_fake_mode` is private too)."""
    return torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE)


def has_kernel_for(op_name: str, dispatch_key: str) -> bool:
    """Whether the dispatcher has a kernel for `op_name` under `dispatch_key` (is an op on
    autocast's lists). Waits for: a public dispatcher query, or autocast's op lists in Python."""
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(op_name, dispatch_key))


def sdp_priority_order() -> list[int]:
    """The order in which `scaled_dot_product_attention` tries its kernels. Waits for: a getter
    beside `torch.nn.attention.sdpa_kernel(..., set_priority=True)`, which only sets it."""
    return list(torch._C._get_sdp_priority_order())


def meta_grouped_mm(*args: Any, **kwargs: Any) -> torch.Tensor:
    """torch's own meta kernel of `aten._grouped_mm` (its shape checks), which the relaxed one
    wraps. Waits for: `torch.library` access to a registered kernel of an op."""
    from torch._meta_registrations import meta_grouped_mm as kernel

    return kernel(*args, **kwargs)


def check(condition: Any, message: Callable[[], str]) -> None:
    """`torch._check`: a check that a meta kernel makes, which a trace keeps symbolic. torch's
    docs list it, but under a private name; waits for a public one."""
    torch._check(condition, message)


def destroy_library(library: torch.library.Library) -> None:
    """Unregister the kernels a `torch.library.Library` registered, now rather than when it is
    collected. Waits for: a public `Library.close()` or a context manager."""
    library._destroy()


# nn.Module's conversion of every parameter and buffer (what `.to()`, `.half()`, `.float()` run),
# and its tables, which a trace swaps entries of without the checks of `register_parameter`.
# Waits for: a hook on module conversion (`torch.__future__.set_swap_module_params_on_conversion`
# covers tensors a trace holds weak references to only in part), and public access to the tables.
module_apply: Callable[..., nn.Module] = nn.Module._apply


def convert(module: nn.Module, fn: Callable[..., Any]) -> nn.Module:
    """`module._apply(fn)`: a module class may override it (to keep some tensors as they are)."""
    return module._apply(fn)


@contextmanager
def patch_module_apply(replacement: Callable[..., nn.Module]) -> Iterator[None]:
    with mock.patch.object(nn.Module, "_apply", replacement):
        yield


def parameters_table(module: nn.Module) -> dict[str, Any]:
    return module._parameters


def buffers_table(module: nn.Module) -> dict[str, Any]:
    return module._buffers


def non_persistent_buffers(module: nn.Module) -> set[str]:
    return module._non_persistent_buffers_set


@contextmanager
def patch_traceback_filter(replacement: Callable[..., Any]) -> Iterator[None]:
    """Which stack frames make_fx records as a node's source (the model's, not torch's). Waits for:
    a public option of make_fx / `torch.fx.traceback` for the frames to keep."""
    from torch.fx.proxy import TracerBase

    with mock.patch.object(TracerBase, "_filter_traceback_frames", replacement):
        yield


@contextmanager
def patch_tensor_checks(check_with: Callable[..., None], check_all: Callable[..., None]) -> Iterator[None]:
    """`torch._check_tensor_all_with` and `torch._check_tensor_all` (what transformers' checks on
    tensor values call) replaced. Waits for: a fake-tensor mode option to skip value checks."""
    with (
        mock.patch.object(torch, "_check_tensor_all_with", check_with),
        mock.patch.object(torch, "_check_tensor_all", check_all),
    ):
        yield


def original_tensor_checks() -> tuple[Callable[..., None], Callable[..., None]]:
    return torch._check_tensor_all_with, torch._check_tensor_all


@contextmanager
def amp_always_available() -> Iterator[None]:
    """CUDA autocast's check that a GPU is there, answered yes (the trace emulates one). Waits for:
    autocast state set without the check (`torch.set_autocast_enabled` does, but `torch.autocast`
    blocks in the model's own code still ask `torch.cuda.amp.common`)."""
    with mock.patch("torch.cuda.amp.common.amp_definitely_not_available", return_value=False):
        yield
