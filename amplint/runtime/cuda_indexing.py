"""Tensor indexing for fake CUDA tensors on a PyTorch build without CUDA.

amplint traces models over FakeTensors whose fake device is ``cuda:0`` so that
the CUDA autocast kernels pick the dtypes. On a CPU-only build the Python
bindings of ``Tensor.__getitem__``/``__setitem__``, ``.contiguous()``,
``.cuda()`` and ``.to("cuda")`` open a CUDA device guard before they dispatch
and fail with "PyTorch is not linked with support for cuda devices", although
the aten ops they lower to work fine on fake tensors. :class:`CudaIndexingMode`
re-expresses those methods through dispatcher ops.

:func:`getitem` and :func:`setitem` mirror ``torch/csrc/autograd/
python_variable_indexing.cpp`` and ``ATen/TensorIndexing.h`` step by step (same
ops, same index bookkeeping, same errors), so they can be checked against real
CPU tensors.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any, TypeGuard
from unittest import mock

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from amplint.runtime.compat import (
    FakeTensor,
    OpOverloadPacket,
    TensorBase,
    active_fake_mode,
    disable_current_modes,
)

__all__ = ["CudaIndexingMode", "getitem", "setitem"]

aten = torch.ops.aten

# CPython's PY_SSIZE_T_MAX: the stop that slice unpacking uses for ``x[a:]``.
_SSIZE_MAX = 2**63 - 1
_MASK_DTYPES = (torch.bool, torch.uint8)
_INVALID_INDEX = "only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are valid indices (got {})"

Index = Any
Indices = list[torch.Tensor | None]


# --------------------------------------------------------------------------- helpers


def _is_int(obj: object) -> bool:
    # THPUtils_checkLong: Python ints but not bools (bools are masks, not positions).
    return isinstance(obj, (int, torch.SymInt)) and not isinstance(obj, bool)


def _is_sequence(obj: object) -> bool:
    # PySequence_Check: anything with sequence __getitem__, dicts excluded.
    return not isinstance(obj, dict) and hasattr(type(obj), "__getitem__")


def _active_fake_mode() -> Any:
    return active_fake_mode()


def _like(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Make a real tensor usable next to ``x``: FakeTensorMode rejects real inputs."""
    if not isinstance(x, FakeTensor) or isinstance(t, FakeTensor):
        return t
    if _active_fake_mode() is not None:
        # lift_fresh_copy is how torch.tensor() enters fake mode; under make_fx it
        # is also recorded, with ``t`` as a graph constant.
        return aten.lift_fresh_copy.default(t)
    return x.fake_mode.from_tensor(t)


def _known_value(t: torch.Tensor) -> torch.Tensor | None:
    """The data behind ``t`` when it is known at trace time (real or constant fake)."""
    if isinstance(t, FakeTensor):
        return t.constant
    return t


def _item(t: torch.Tensor) -> int | float | bool | None:
    known = _known_value(t)
    if known is None:
        return None
    # Real data must be read with fake/proxy modes off, or they reject it.
    with disable_current_modes():
        return known.item()


def _check_dim(t: torch.Tensor, dim: int) -> None:
    n = t.dim()
    if not -max(n, 1) <= dim < max(n, 1):
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})"
        )


def _is_mask(t: torch.Tensor) -> bool:
    return t.dtype in _MASK_DTYPES


def _bool_index(x: torch.Tensor, value: bool) -> torch.Tensor:
    # boolToIndexingTensor: True indexes the new unit dim as ``0:``, False as empty.
    return aten.new_zeros.default(x, [1 if value else 0], dtype=torch.long)


def _slice_bounds(s: slice) -> tuple[Any, Any, Any]:
    """__PySlice_Unpack: defaults and clamping of CPython, tensors via __index__."""

    def value(v: Any) -> Any:
        if isinstance(v, torch.SymInt):
            return v
        if isinstance(v, torch.Tensor):
            known = _item(v)
            if known is None:
                # CPython reads the bound with `__index__` (`Tensor.item`): the dispatcher's read,
                # which a recorded real run answers, or which says that the value is data-dependent.
                return operator.index(aten._local_scalar_dense.default(v))
            return int(known)
        try:
            return operator.index(v)
        except TypeError:
            raise TypeError("slice indices must be integers or None or have an __index__ method") from None

    step = 1 if s.step is None else value(s.step)
    if isinstance(step, int) and step == 0:
        raise ValueError("slice step cannot be zero")
    start = (_SSIZE_MAX if step < 0 else 0) if s.start is None else value(s.start)
    stop = (-_SSIZE_MAX - 1 if step < 0 else _SSIZE_MAX) if s.stop is None else value(s.stop)
    if isinstance(start, int):
        start = max(min(start, _SSIZE_MAX), -_SSIZE_MAX)
    if isinstance(stop, int):
        stop = max(min(stop, _SSIZE_MAX), -_SSIZE_MAX)
    return start, stop, step


def _apply_select(t: torch.Tensor, dim: int, index: Any, real_dim: int) -> torch.Tensor:
    if t.dim() == 0:
        if isinstance(index, int) and index == 0:
            raise IndexError(
                "invalid index of a 0-dim tensor. Use `tensor.item()` in Python or "
                "`tensor.item<T>()` in C++ to convert a 0-dim tensor to a number"
            )
        size: Any = 0
    else:
        _check_dim(t, dim)
        size = t.shape[dim]
    if isinstance(index, int) and isinstance(size, int) and not -size <= index < size:
        raise IndexError(f"index {index} is out of bounds for dimension {real_dim} with size {size}")
    # aten.select takes negative indices itself; PyTorch leaves them unnormalised too.
    return aten.select.int(t, dim, index)


def _apply_slice(t: torch.Tensor, dim: int, s: slice, optimize: bool) -> torch.Tensor:
    start, stop, step = _slice_bounds(s)
    if not (isinstance(step, torch.SymInt) or step > 0):
        raise ValueError("step must be greater than zero")
    if t.dim() == 0:
        raise IndexError("slice() cannot be applied to a 0-dim tensor.")
    _check_dim(t, dim)
    # Inside a tuple PyTorch skips a slice that spans the whole dim exactly.
    if optimize and isinstance(start, int) and start == 0 and stop == t.shape[dim] and step == 1:
        return t
    return aten.slice.Tensor(t, dim, start, stop, step)


def _sequence_to_tensor(seq: Any) -> torch.Tensor:
    """sequenceToVariable: a nested list becomes a long (or bool/byte mask) index tensor."""
    if isinstance(seq, (str, bytes)):
        raise TypeError(f"new(): invalid data type '{type(seq).__name__}'")
    # A real CPU tensor: aten.index accepts CPU indices for a CUDA self, a CUDA
    # factory would hit the very device guard this module avoids, and under fake
    # mode the data of a mask would be lost (it is needed for nonzero()).
    with disable_current_modes():
        t = torch.tensor(seq, device="cpu")
        return t if t.dtype in _MASK_DTYPES else t.to(torch.long)


def _count_specified_dims(index: tuple[Any, ...]) -> int:
    count = 0
    for obj in index:
        if isinstance(obj, torch.Tensor):
            count += obj.dim() if _is_mask(obj) else 1
        elif obj is not None and obj is not Ellipsis and not isinstance(obj, bool):
            count += 1
    return count


def _treat_sequence_as_tuple(index: Any) -> bool:
    # NumPy's legacy heuristic, kept by PyTorch: x[[0, slice(None)]] is x[0, :].
    if isinstance(index, tuple):
        return True
    if isinstance(index, torch.Tensor) or not _is_sequence(index):
        return False
    try:
        n = len(index)
        if n >= 32:
            return False
        items = [index[i] for i in range(n)]
    except Exception:
        return False
    return any(
        isinstance(obj, (torch.Tensor, slice)) or _is_sequence(obj) or obj is None or obj is Ellipsis
        for obj in items
    )


def _record(indices: Indices, t: torch.Tensor, dim: list[int]) -> None:
    # recordTensorIndex: list positions, not dims; a k-dim mask takes one slot
    # but k dims because aten.index expands it in place.
    if not indices:
        indices.extend([None] * dim[0])
    indices.append(t)
    dim[0] += t.dim() if _is_mask(t) else 1


def _pad(indices: Indices, n: int) -> None:
    if indices:
        indices.extend([None] * n)


def _apply_slicing(x: torch.Tensor, index: tuple[Any, ...], indices: Indices) -> torch.Tensor:
    """applySlicing: apply basic indices as views, collect the advanced ones."""
    ndim = x.dim()
    specified = _count_specified_dims(index)
    if specified > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim}")
    result = x
    dim = [0]
    for real_dim, obj in enumerate(index):
        if _is_int(obj):
            result = _apply_select(result, dim[0], obj, real_dim)
        elif isinstance(obj, slice):
            result = _apply_slice(result, dim[0], obj, optimize=True)
            dim[0] += 1
            _pad(indices, 1)
        elif obj is Ellipsis:
            dim[0] += ndim - specified
            _pad(indices, ndim - specified)
        elif obj is None:
            result = aten.unsqueeze.default(result, dim[0])
            dim[0] += 1
            _pad(indices, 1)
        elif isinstance(obj, bool):
            result = aten.unsqueeze.default(result, dim[0])
            _record(indices, _bool_index(x, obj), dim)
        elif isinstance(obj, torch.Tensor):
            result = _apply_tensor(x, result, obj, indices, dim, real_dim)
        elif _is_sequence(obj):
            _record(indices, _sequence_to_tensor(obj), dim)
        else:
            try:
                i = operator.index(obj)
            except TypeError:
                raise IndexError(_INVALID_INDEX.format(type(obj).__name__)) from None
            result = _apply_select(result, dim[0], i, real_dim)
    return result


def _apply_tensor(
    x: torch.Tensor, result: torch.Tensor, t: torch.Tensor, indices: Indices, dim: list[int], real_dim: int
) -> torch.Tensor:
    if t.dim() != 0 or t.is_floating_point() or t.is_complex():
        _record(indices, t, dim)
        return result
    # A 0-dim integer tensor is a select (a view), not advanced indexing.
    value = _item(t)
    if not _is_mask(t):
        if value is not None:
            return _apply_select(result, dim[0], int(value), real_dim)
        # Data-dependent under fake mode: PyTorch would call item() and fail. A
        # lone 0-dim index applied right here drops the dim exactly like select.
        _check_dim(result, dim[0])
        return aten.index.Tensor(result, [None] * dim[0] + [_like(x, t)])
    result = aten.unsqueeze.default(result, dim[0])
    if value is None:
        # Unknown 0-dim mask: the output size is data-dependent either way.
        _record(indices, aten.view.default(t, [1]), dim)
        return result
    _record(indices, _bool_index(x, bool(value)), dim)
    return result


def _finish_indices(x: torch.Tensor, sliced: torch.Tensor, indices: Indices) -> Indices:
    """Make the collected index tensors usable with ``x``.

    Under fake mode aten.index on a mask needs nonzero(), whose output size
    FakeTensorMode cannot know; for a real or constant mask we can, and this is
    PyTorch's own expansion (expandTensors). Real tensors are then lifted to fake.
    """
    if not isinstance(x, FakeTensor):
        return indices
    out: Indices = []
    d = 0
    for t in indices:
        known = None if t is None or not _is_mask(t) else _known_value(t)
        if known is None:
            out.append(None if t is None else _like(x, t))
            d += t.dim() if t is not None and _is_mask(t) else 1
            continue
        for j in range(known.dim()):
            size = sliced.shape[d + j] if d + j < sliced.dim() else None
            if known.shape[j] != size:
                raise IndexError(
                    f"The shape of the mask {list(known.shape)} at index {j} does not match the shape "
                    f"of the indexed tensor {list(sliced.shape)} at index {d + j}"
                )
        with disable_current_modes():
            cols = known.nonzero().unbind(1)
        out.extend(_like(x, col) for col in cols)
        d += known.dim()
    return out


# --------------------------------------------------------------------------- getitem


def getitem(x: torch.Tensor, index: Index) -> torch.Tensor:
    """``x[index]`` through dispatcher ops only (mirrors THPVariable_getitem)."""
    if index is None:
        return aten.unsqueeze.default(x, 0)
    if index is Ellipsis:
        return aten.alias.default(x)
    if _is_int(index):
        return _apply_select(x, 0, index, 0)
    if isinstance(index, slice):
        return _apply_slice(x, 0, index, optimize=False)
    if isinstance(index, bool):
        result = aten.unsqueeze.default(x, 0)
        return aten.index.Tensor(result, [_bool_index(x, index)])

    wrapped = tuple(index) if _treat_sequence_as_tuple(index) else (index,)
    indices: Indices = []
    sliced = _apply_slicing(x, wrapped, indices)
    if not indices:
        # x[...] and friends return a fresh alias, never ``x`` itself.
        return aten.alias.default(sliced) if sliced is x else sliced
    return aten.index.Tensor(sliced, _finish_indices(x, sliced, indices))


# --------------------------------------------------------------------------- setitem


def _value_to_tensor(x: torch.Tensor, value: Any) -> torch.Tensor:
    """valueToTensor: Python scalars become 0-dim CPU tensors of ``x``'s dtype."""
    if isinstance(value, torch.Tensor):
        return _like(x, value)
    if isinstance(value, (bool, int, float, complex, torch.SymInt, torch.SymFloat)):
        scalar = int(value) if isinstance(value, bool) else value
        return _like(x, aten.scalar_tensor.default(scalar, dtype=x.dtype, device="cpu"))
    raise TypeError(f"can't assign a {type(value).__name__} to a {x.dtype} tensor")


def _strip_leading_ones(t: torch.Tensor) -> torch.Tensor:
    # slicePrefix1sSize: NumPy-compatible dropping of leading unit dims of the value.
    sizes = list(t.shape)
    k = 0
    while k < len(sizes) and sizes[k] == 1:
        k += 1
    return t if k == 0 else aten.view.default(t, sizes[k:])


def _copy_to(dst: torch.Tensor, src: torch.Tensor) -> None:
    if dst.shape == src.shape:
        aten.copy_.default(dst, src)
    elif src.dim() == 0 and src.device.type == "cpu":
        aten.fill_.Tensor(dst, src)
    else:
        src = _strip_leading_ones(src)
        if src.shape != dst.shape:
            src = aten.expand.default(src, list(dst.shape))
        aten.copy_.default(dst, src)


def setitem(x: torch.Tensor, index: Index, value: Any) -> None:
    """``x[index] = value`` through dispatcher ops only (mirrors THPVariable_setitem)."""
    v = _value_to_tensor(x, value)
    if index is False:
        return
    if index is Ellipsis:
        _copy_to(x, v)
        return
    if index is None or index is True:
        _copy_to(aten.unsqueeze.default(x, 0), v)
        return
    if _is_int(index):
        _copy_to(_apply_select(x, 0, index, 0), v)
        return
    if isinstance(index, slice):
        _copy_to(_apply_slice(x, 0, index, optimize=True), v)
        return

    wrapped = tuple(index) if _treat_sequence_as_tuple(index) else (index,)
    indices: Indices = []
    sliced = _apply_slicing(x, wrapped, indices)
    if not indices:
        _copy_to(sliced, v)
        return
    values = _strip_leading_ones(v)
    aten.index_put_.default(sliced, _finish_indices(x, sliced, indices), values, False)


# --------------------------------------------------------------------------- the mode


def _cuda_index() -> int:
    # Tracers may patch torch.cuda.is_available() on a CPU-only build.
    try:
        return torch.cuda.current_device() if torch.cuda.is_available() else 0
    except (RuntimeError, AssertionError):
        return 0


def _pin_cuda(device: Any) -> Any:
    """``"cuda"`` -> ``cuda:<current>``: only the index-less form trips the guard."""
    if isinstance(device, str):
        try:
            device = torch.device(device)
        except RuntimeError:
            return device
    if isinstance(device, torch.device) and device.type == "cuda" and device.index is None:
        return torch.device("cuda", _cuda_index())
    return device


def _cuda(x: torch.Tensor, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> torch.Tensor:
    if device is None:
        target = torch.device("cuda", _cuda_index())
    elif _is_int(device):
        target = torch.device("cuda", device)
    else:
        target = _pin_cuda(device)
        if not isinstance(target, torch.device) or target.type != "cuda":
            raise RuntimeError(f"Invalid device, must be cuda device, got {device}")
    return x.to(target, non_blocking=non_blocking, **kwargs)


def _contiguous(
    x: torch.Tensor, memory_format: torch.memory_format = torch.contiguous_format
) -> torch.Tensor:
    if memory_format == torch.preserve_format:
        raise RuntimeError("preserve memory format is unsupported by the contiguous operator")
    if x.is_contiguous(memory_format=memory_format):
        return x
    return aten.clone.default(x, memory_format=memory_format)


def _from_data(func: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any], device: Any) -> Any:
    """`torch.tensor(data, device="cuda")`: the CUDA path of the binding needs a CUDA build, so the
    tensor is built on the CPU and moved."""
    with disable_current_modes():
        known = func(*args, **{**kwargs, "device": "cpu"})
    return _moved(known, device, known.dtype)


def _moved(known: torch.Tensor, device: Any, dtype: torch.dtype) -> torch.Tensor:
    """A real CPU tensor on the fake GPU. One of at most one element is made by a factory: make_fx
    treats it as a constant and would move the real one, which needs a CUDA build."""
    if known.numel() > 1:
        with disable_current_modes():
            known = known.to(dtype)
        return aten._to_copy.default(aten.lift_fresh_copy.default(known), device=device)
    with disable_current_modes():
        value = known.item() if known.numel() else 0
    return torch.full(known.shape, value, dtype=dtype, device=device)


def _to_device(args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """The device of a `Tensor.to(...)` call: `to(device)`, `to(device, dtype)` or `device=`."""
    first = args[1] if len(args) > 1 else None
    return kwargs.get("device", first if isinstance(first, (str, torch.device)) else None)


def _to_dtype(x: torch.Tensor, args: Sequence[Any], kwargs: dict[str, Any]) -> torch.dtype:
    dtypes = [a for a in args[1:3] if isinstance(a, torch.dtype)]
    return kwargs.get("dtype") or (dtypes[0] if dtypes else x.dtype)


def _constant_to_cuda(x: object, args: Sequence[Any], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """The known data of a CPU tensor that a fake mode moves to the fake GPU: a real tensor the
    model made before the trace, or a constant one made during it (`torch.tensor(4096)`), which
    make_fx would move for real. None for anything else."""
    if (
        not isinstance(x, torch.Tensor)
        or x.device.type != "cpu"
        or _active_fake_mode() is None
        or not _cuda_device(_to_device(args, kwargs))
    ):
        return None
    return _known_value(x)


def _cuda_device(device: Any) -> bool:
    if isinstance(device, str):
        return device.startswith("cuda")
    return isinstance(device, torch.device) and device.type == "cuda"


def _unguarded(name: str, op: Callable[..., Any]) -> Callable[..., Any]:
    """`Tensor.<name>` that runs `op` for a fake CUDA tensor, whose binding would hit the guard."""
    method = getattr(TensorBase, name)

    def call(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if isinstance(self, FakeTensor) and self.device.type == "cuda":
            return op(self, *args, **kwargs)
        return method(self, *args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call


def _copy(dst: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    return aten.copy_.default(dst, src, non_blocking)


def _on_cuda(obj: object) -> TypeGuard[torch.Tensor]:
    return isinstance(obj, torch.Tensor) and obj.device.type == "cuda"


_NOT_LINKED = "not linked with support for cuda devices"
# Tensor methods that return a Python number, and the conversion each makes of `item()`.
_SCALARS: dict[Any, Callable[[Any], Any]] = {
    torch.Tensor.__int__: int,
    torch.Tensor.__float__: float,
    torch.Tensor.__bool__: bool,
    torch.Tensor.__index__: int,
    torch.Tensor.item: lambda value: value,
}
_FROM_DATA = frozenset({torch.tensor, torch.as_tensor})
# Tensor methods whose aten op has another name.
_ATEN_NAMES = {
    "__invert__": "bitwise_not",
    "__and__": "bitwise_and",
    "__or__": "bitwise_or",
    "__xor__": "bitwise_xor",
    "__iand__": "bitwise_and_",
    "__ior__": "bitwise_or_",
    "__ixor__": "bitwise_xor_",
}
_UNGUARDED = {
    "copy_": _unguarded("copy_", _copy),
    "contiguous": _unguarded("contiguous", _contiguous),
    "__getitem__": _unguarded("__getitem__", getitem),
    "__setitem__": _unguarded("__setitem__", setitem),
}


class CudaIndexingMode(TorchFunctionMode):
    """Route CUDA-tensor indexing and device moves through dispatcher ops.

    Use it together with a FakeTensorMode whose tensors live on ``cuda:0``::

        with FakeTensorMode(), CudaIndexingMode():
            x = torch.empty(2, 3, device="cuda:0")
            y = x[:, [0, 2]]

    Tensors on other devices take PyTorch's normal path. While the mode is on, `Tensor.copy_`,
    `Tensor.contiguous` and indexing also work on fake CUDA tensors where torch itself uses them
    with every mode off (FakeTensor's convolution, decompositions such as `uniform_` and
    `grid_sampler_2d`).
    """

    _reentered = False

    def __enter__(self) -> CudaIndexingMode:
        # On FakeTensor, not Tensor: a class given `__getitem__` gets CPython's sequence slot too,
        # which no deletion empties, and torch's C++ then takes its tensors for sequences
        # (`torch.tensor([torch.tensor(0)])` asks len() of the 0-d tensor) in the real runs after.
        self._patched = [(name, FakeTensor.__dict__.get(name)) for name in _UNGUARDED]
        for name, method in _UNGUARDED.items():
            setattr(FakeTensor, name, method)
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        for name, previous in self._patched:
            if previous is None:
                delattr(FakeTensor, name)
            else:
                setattr(FakeTensor, name, previous)

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        x = args[0] if args else None
        if func is torch.Tensor.__getitem__ and _on_cuda(x):
            return getitem(x, args[1])
        if func is torch.Tensor.__setitem__ and _on_cuda(x):
            setitem(x, args[1], args[2])
            return None
        if func is torch.Tensor.contiguous and _on_cuda(x):
            return _contiguous(*args, **kwargs)
        if func in _FROM_DATA and _cuda_device(kwargs.get("device")):
            return _from_data(func, args, kwargs, _pin_cuda(kwargs["device"]))
        if func is torch.Tensor.new_tensor and _on_cuda(x):
            device = _pin_cuda(kwargs.get("device") or x.device)
            return _from_data(torch.tensor, args[1:], {"dtype": kwargs.get("dtype") or x.dtype}, device)
        known = _constant_to_cuda(x, args, kwargs) if func is torch.Tensor.to else None
        if known is not None:
            return _moved(known, _pin_cuda(_to_device(args, kwargs)), _to_dtype(known, args, kwargs))
        if func is torch.Tensor.type_as and len(args) > 1 and _on_cuda(args[1]):
            # `torch.tensor(4).type_as(x)`: a CPU constant taking a fake CUDA tensor's device and dtype.
            known = _constant_to_cuda(x, (x, args[1].device), {})
            if known is not None:
                return _moved(known, args[1].device, args[1].dtype)
        if func in _SCALARS and _on_cuda(x):
            # A Python number from a fake CUDA tensor: its value when the trace knows it, else the
            # dispatcher's read, which says that the value is data-dependent.
            value = _known_value(x)
            if value is None:
                return _SCALARS[func](aten._local_scalar_dense.default(x))
            with disable_current_modes():
                return _SCALARS[func](value.item())
        # Fake CPU tensors moving to the fake GPU hit the same guard, so they count.
        movable = _on_cuda(x) or isinstance(x, FakeTensor)
        if func is torch.Tensor.cuda and movable:
            return _cuda(*args, **kwargs)
        if func is torch.Tensor.to and movable:
            args = (args[0], *(_pin_cuda(a) for a in args[1:2]), *args[2:])
            if "device" in kwargs:
                kwargs = {**kwargs, "device": _pin_cuda(kwargs["device"])}
        if not any(_on_cuda(a) for a in (*args, *kwargs.values())):
            return func(*args, **kwargs)
        try:
            return func(*args, **kwargs)
        except RuntimeError as exc:
            if _NOT_LINKED not in str(exc):
                raise
            if getattr(func, "__module__", None) == "torch.nn.functional" and not self._reentered:
                # A Python function (`F.grid_sample`) whose inner binding hit the guard: run its body
                # again with this mode on, so that the binding comes here and takes its aten op.
                return self._reenter(func, args, kwargs)
            # A binding that opens the device guard (`~x`, `x.copy_(y)`, `torch.grid_sampler`)
            # fails before it dispatches: run its aten op instead.
            if getattr(func, "__name__", None) == "nonzero":  # its `as_tuple` is the binding's own
                found = aten.nonzero.default(args[0])
                return found.unbind(1) if kwargs.get("as_tuple") else found
            packet = getattr(aten, _ATEN_NAMES.get(func.__name__, func.__name__), None)
            if not isinstance(packet, OpOverloadPacket):
                raise
            try:
                return packet(*args, **kwargs)
            except RuntimeError as other:
                if "failed to match any schema" in str(other):  # its arguments are no aten op's
                    raise exc from None
                raise

    def _reenter(self, func: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        checks = ("has_torch_function", "has_torch_function_unary", "has_torch_function_variadic")
        self._reentered = True
        try:
            with ExitStack() as stack:
                for name in checks:  # so that the function runs its body instead of coming back here
                    stack.enter_context(mock.patch.object(F, name, lambda *a: False))
                stack.enter_context(self)
                return func(*args, **kwargs)
        finally:
            self._reentered = False
