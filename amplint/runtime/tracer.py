"""Trace a model under autocast with make_fx over fake tensors and record the dtype of every op.

On a CPU-only torch build, FakeTensors whose fake device is `cuda:0` carry the AutocastCUDA
dispatch key, so the real CUDA autocast kernels decide each op's dtype: no GPU and no weights are
needed. `torch.autocast("cuda")` switches itself off without CUDA, so the autocast state is set
directly, and autocast blocks inside the user's code are kept alive by answering the two questions
that switch them off.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import operator
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import torch
import torch.fx.traceback as fx_traceback
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.proxy import TracerBase

from amplint.runtime import compat
from amplint.runtime.backward import PHASE, backward_graph, loss_of
from amplint.runtime.compat import FakeTensor, FakeTensorMode, OpOverload, TensorBase, tree_leaves, tree_map
from amplint.runtime.cpu_replay import first_tensor, replay_outputs
from amplint.runtime.cuda_attention import CudaAttentionMode
from amplint.runtime.cuda_indexing import CudaIndexingMode
from amplint.runtime.cuda_kernels import relaxed_meta
from amplint.runtime.gpu import DEFAULT_GPU, GPUS
from amplint.runtime.gpu import emulated as emulated_gpu
from amplint.runtime.graph import (
    FLOATING,
    LOSS_MODULE,
    DtypeGraph,
    DtypeNode,
    TraceError,
    ValueLimits,
    source_of,
)
from amplint.runtime.oracle import (
    AnsweringFakeTensorMode,
    Answers,
    answering,
    asks_for_values,
    record,
    stand_in_weights,
)
from amplint.runtime.policy import classify
from amplint.runtime.target import MadeInTrace, is_user_code, user_frame

_CAST_OPS = frozenset({"_to_copy", "to", "convert_element_type", "_to_dtype"})
# Where a tensor method's function object lives (`Tensor.to` is TensorBase's).
_TENSOR_CLASSES = (torch.Tensor, TensorBase)
_CAST_METHODS = frozenset({"to", "float", "double", "half", "bfloat16", "type", "type_as"})


@contextmanager
def _conversions_in_place() -> Iterator[None]:
    """What a forward does to its fake state and scalars that torch does for real ones only.
    `module.to(dtype)` inside a forward (Switch Transformers' router casts its classifier to
    float32 on each call): torch swaps a fake parameter for its converted copy, which a tensor the
    trace tracks (it holds a weak reference) refuses; the module's entry is replaced instead, for
    the call (functional_call puts the traced state back when the forward returns). A deep copy
    of a fake tensor (Dory copies its cache's layers for each loop): torch copies its storage,
    which a trace cannot hold, so it is cloned instead, the same copy as an op."""
    original = compat.module_apply

    def _apply(module: nn.Module, fn: Callable[..., Any], recurse: bool = True) -> nn.Module:
        tables = (compat.parameters_table(module), compat.buffers_table(module))
        tensors = (*tables[0].values(), *tables[1].values())
        if not any(isinstance(t, FakeTensor) for t in tensors):
            return original(module, fn, recurse)
        if recurse:
            for child in module.children():
                compat.convert(child, fn)
        for table in tables:
            for key, tensor in table.items():
                if tensor is not None:
                    table[key] = fn(tensor)
        return module

    def __format__(tensor: torch.Tensor, spec: str) -> str:
        # A 0-d tensor formats as its value (an expert's index in Switch Transformers' key
        # f"expert_{index}"): torch does so for plain tensors only, a fake one would print itself.
        if tensor.dim() == 0 and isinstance(tensor, FakeTensor):
            return tensor.item().__format__(spec)
        return formatted(tensor, spec)

    def __deepcopy__(tensor: torch.Tensor, memo: dict[int, Any]) -> torch.Tensor:
        if id(tensor) not in memo:
            memo[id(tensor)] = tensor.clone().requires_grad_(tensor.requires_grad)
        return memo[id(tensor)]

    formatted = torch.Tensor.__format__
    with (
        compat.patch_module_apply(_apply),
        mock.patch.object(torch.Tensor, "__format__", __format__),
        mock.patch.object(FakeTensor, "__deepcopy__", __deepcopy__),
    ):
        yield


def dtype_name(dtype: torch.dtype | None) -> str | None:
    return None if dtype is None else str(dtype).removeprefix("torch.")


@contextmanager
def autocast_enabled(device: str, dtype: torch.dtype, enabled: bool) -> Iterator[None]:
    """Autocast on `device` as `torch.autocast` would set it, without its CUDA availability check."""
    if not enabled:
        yield
        return
    previous = (torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
    torch.set_autocast_enabled(device, True)
    torch.set_autocast_dtype(device, dtype)
    torch.autocast_increment_nesting()
    try:
        with compat.amp_always_available():
            yield
    finally:
        if torch.autocast_decrement_nesting() == 0:
            torch.clear_autocast_cache()
        torch.set_autocast_enabled(device, previous[0])
        torch.set_autocast_dtype(device, previous[1])


def _op_name(func: Any) -> str:
    name = getattr(func, "__name__", None) or repr(func)
    if getattr(func, "__objclass__", None) in _TENSOR_CLASSES:
        return f"Tensor.{name}"
    module = getattr(func, "__module__", None) or "torch"
    return f"{'torch' if module.startswith(compat.C_MODULE) else module}.{name}"


class _CastTagMode(torch.overrides.TorchFunctionMode):
    """Marks the nodes a user's `.float()` / `.to(dtype)` creates, so that they can be told apart
    from the casts autocast inserts (both are `_to_copy` after dispatch); and names, on an
    exception, the innermost torch function it came from (`_OP`)."""

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        try:
            if (
                getattr(func, "__name__", None) in _CAST_METHODS
                and getattr(func, "__objclass__", None) in _TENSOR_CLASSES
            ):
                with fx_traceback.annotate({"amplint_user_cast": True}):
                    return func(*args, **kwargs)
            return func(*args, **kwargs)
        except Exception as exc:
            if not hasattr(exc, _OP):
                with contextlib.suppress(AttributeError):  # an exception type with __slots__
                    setattr(exc, _OP, _op_name(func))
            raise


_OP = "_amplint_op"


class _Annotations:
    """fx annotations opened and closed from hooks, which no `with` block can span."""

    def __init__(self) -> None:
        self._open: list[Any] = []

    def push(self, annotation: dict[str, Any]) -> None:
        context = fx_traceback.annotate(annotation)
        context.__enter__()
        self._open.append(context)

    def pop(self) -> None:
        if self._open:
            self._open.pop().__exit__(None, None, None)

    def close(self) -> None:
        while self._open:  # e.g. a forward that raised never reached its post-hook
            self.pop()


@contextmanager
def _autocast_blocks(device: str) -> Iterator[None]:
    """Annotate the nodes created inside a user's `torch.autocast(...)` block on the traced device
    with the state it sets (off, or its dtype), so that their policy reflects that block."""
    original_enter, original_exit = torch.amp.autocast.__enter__, torch.amp.autocast.__exit__
    annotations = _Annotations()

    def enter(self: torch.amp.autocast) -> torch.amp.autocast:
        result = original_enter(self)
        state = dtype_name(self.fast_dtype) if self._enabled else "off"
        annotations.push({"amplint_autocast": state} if self.device == device else {})
        return result

    def leave(self: torch.amp.autocast, *exc: Any) -> Any:
        annotations.pop()
        return original_exit(self, *exc)

    with (
        mock.patch.object(torch.amp.autocast, "__enter__", enter),
        mock.patch.object(torch.amp.autocast, "__exit__", leave),
    ):
        try:
            yield
        finally:
            annotations.close()


def _user_frames(self: TracerBase, summary: traceback.StackSummary) -> traceback.StackSummary:
    """Keep only the innermost frame of the user's code, with its column folded into the name."""
    for frame in reversed(summary):
        if is_user_code(frame.filename):
            column = getattr(frame, "colno", None)
            if column is None:
                column = _live_column(frame.filename, frame.lineno or 0)
            name = f"{frame.name}@{'-' if column is None else column + 1}"
            return traceback.StackSummary.from_list([(frame.filename, frame.lineno or 0, name, "")])
    return traceback.StackSummary.from_list([])


_POSITIONS: dict[Any, list[tuple[int | None, int | None, int | None, int | None]]] = {}


def _live_column(filename: str, line: int) -> int | None:
    """The 0-based column of the expression the user's frame at `filename:line` is running, from the
    live stack (torch's captured traceback has lines only); None before Python 3.11."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_filename == filename and frame.f_lineno == line:
            if not hasattr(code, "co_positions"):
                return None
            positions = _POSITIONS.get(code)
            if positions is None:
                positions = _POSITIONS[code] = list(code.co_positions())
            index = frame.f_lasti // 2
            return positions[index][2] if 0 <= index < len(positions) else None
        frame = frame.f_back  # type: ignore[assignment]
    return None


@contextmanager
def _module_paths(model: nn.Module | None, running: list[str]) -> Iterator[None]:
    """Annotate every node with the path of the innermost module running when it was created;
    `running` holds the paths of the modules running now (innermost last)."""
    if model is None:
        yield
        return
    # Submodules by the dotted path state dicts use (`model.layers.3.self_attn`); the root by its class.
    names = {id(module): name or type(module).__name__ for name, module in model.named_modules()}
    annotations = _Annotations()

    def enter(module: nn.Module, args: Any) -> None:
        name = names.get(id(module))
        if name is not None:
            annotations.push({"amplint_module": name})
            running.append(name)

    def leave(module: nn.Module, args: Any, output: Any) -> None:
        if id(module) in names:
            annotations.pop()
            running.pop()

    pre = nn.modules.module.register_module_forward_pre_hook(enter)
    post = nn.modules.module.register_module_forward_hook(leave)
    try:
        yield
    finally:
        pre.remove()
        post.remove()
        annotations.close()


def _fake(value: Any, mode: FakeTensorMode, device: str, param_dtype: torch.dtype | None) -> Any:
    """A fake tensor on the traced device with the same shape and dtype (floating point ones in
    `param_dtype` when given); anything that is not a tensor is returned as it is."""
    if not isinstance(value, torch.Tensor):
        return value
    dtype = param_dtype if param_dtype is not None and value.is_floating_point() else value.dtype
    with mode:
        return torch.empty(value.shape, dtype=dtype, device=device)


def _made(inputs: Any, device: str, param_dtype: torch.dtype | None) -> Any:
    """`inputs` with each `MadeInTrace` made: inside the traced call, its tensors are the trace's."""
    dtype = param_dtype or torch.float32
    return tree_map(lambda v: v.make(device, dtype) if isinstance(v, MadeInTrace) else v, inputs)


def trace(
    fn_or_module: Callable[..., Any] | nn.Module,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    device: str = "cuda",
    dtype: torch.dtype = torch.bfloat16,
    autocast: bool = True,
    param_dtype: torch.dtype | None = None,
    measure: bool = False,
    measure_lines: set[tuple[str, int]] | None = None,
    values: bool = False,
    limits: ValueLimits | None = None,
    max_memory: int | None = None,
    gpu: str = DEFAULT_GPU,
    backward: bool = False,
    labels: torch.Tensor | None = None,
    real_model: Callable[[nn.Module], nn.Module] | None = None,
    outputs: Callable[[Any], None] | None = None,
) -> DtypeGraph:
    """Trace `fn_or_module(*args, **kwargs)` and return the dtype of every op it ran.

    `device` picks whose autocast policy applies (`cuda` is emulated on fake `cuda:0` tensors when
    there is no GPU). `autocast=False` with `param_dtype` traces a model run in that dtype without
    autocast, as half-precision inference usually runs: parameters, buffers and floating-point
    inputs take that dtype. Weights are never materialised. `measure`: replay the graph on the real
    inputs and weights to measure the error at late upcasts, of the ops rules flag, and of every
    half-precision op at `measure_lines` (absolute path, line) (see `amplint.runtime.measure`).
    `values`: replay every op on the real inputs and weights and against float64 (see
    `amplint.runtime.values`; `limits` for the rules that read it, `max_memory` in bytes). `gpu`:
    the GPU emulated without one (`amplint.runtime.gpu.GPUS`): what `torch.cuda` answers about the
    device, and which attention kernel `scaled_dot_product_attention` runs. `backward`: trace the
    backward pass of a loss too (`amplint.runtime.backward`): cross-entropy of the output's logits
    against `labels` (class indices, one per row of logits) when given and they fit, else the sum of
    the outputs with alternating signs; the graph's `gradients` name the node of each trainable
    parameter's gradient. `real_model`: for a model built on the meta device, the model to run on
    the CPU when a real run answers questions about values (`amplint.runtime.oracle`): one whose
    buffers hold the values its config computes. `outputs`: called with what the graph returns when
    replayed on the real inputs and weights, op by op in the traced dtypes (so under the emulated
    CUDA autocast's choices); it is not called for a model without weights."""
    if device not in {"cuda", "cpu"}:
        raise ValueError(f"device must be 'cuda' or 'cpu', not {device!r}")
    fake_device = "cuda:0" if device == "cuda" else "cpu"
    emulated = device == "cuda" and not torch.cuda.is_available()
    mode = AnsweringFakeTensorMode(allow_non_fake_inputs=True)
    model = fn_or_module if isinstance(fn_or_module, nn.Module) else None
    call_args = (tuple(args), dict(kwargs or {}))
    # A model run in `param_dtype` gets its floating-point inputs in that dtype too (`model.half()`
    # is fed half activations); integer inputs (token ids) stay as they are.
    fake_args = tree_map(lambda v: _fake(v, mode, fake_device, param_dtype), call_args)
    trainable = {} if model is None else _trainable(model)
    losses: list[str] = []  # what the backward differentiates, in words
    if backward and not trainable:
        raise TraceError(
            f"--backward needs a model with trainable floating-point parameters; {_defined_at(fn_or_module)} has none"
        )
    if model is not None:
        state = {
            name: _fake(tensor, mode, fake_device, param_dtype)
            for name, tensor in (*model.named_parameters(), *model.named_buffers())
        }

        def run(state: dict[str, torch.Tensor], inputs: Any) -> Any:
            positional, keywords = _made(inputs, fake_device, param_dtype)
            return _traceable(torch.func.functional_call(model, state, positional, keywords))

        traced_inputs: tuple[Any, ...] = (state, fake_args)
        if backward:
            # The labels are an input like the others, so that the values replay has them.
            fake_labels = () if labels is None else (_fake(labels, mode, fake_device, None),)

            def run_with_loss(state: dict[str, torch.Tensor], inputs: Any, *labels: Any) -> Any:
                positional, keywords = _made(inputs, fake_device, param_dtype)
                output = torch.func.functional_call(model, state, positional, keywords)
                with fx_traceback.annotate({"amplint_module": LOSS_MODULE}):
                    loss, described = loss_of(output, labels[0] if labels else None)
                losses.append(described)
                return loss, _traceable(output)

            run = run_with_loss
            traced_inputs = (state, fake_args, *fake_labels)
    else:
        function = fn_or_module

        def run(inputs: Any) -> Any:  # type: ignore[misc]
            positional, keywords = _made(inputs, fake_device, param_dtype)
            return _traceable(function(*positional, **keywords))

        traced_inputs = (fake_args,)

    def traced(answers: Answers | None) -> torch.fx.GraphModule:
        with ExitStack() as stack:
            stack.enter_context(torch.no_grad())
            stack.enter_context(_fake_kernel_log_quiet())
            if emulated:  # what torch.cuda answers about the device, before any autocast block asks
                stack.enter_context(emulated_gpu(GPUS[gpu]))
                stack.enter_context(relaxed_meta())
            stack.enter_context(compat.patch_traceback_filter(_user_frames))
            stack.enter_context(fx_traceback.preserve_node_meta())
            running: list[str] = []  # a forward that raises leaves its module's path here
            stack.enter_context(_module_paths(model, running))
            stack.enter_context(_conversions_in_place())
            unchecked.clear()
            stack.enter_context(_value_checks_skipped(unchecked))
            stack.enter_context(autocast_enabled(device, dtype, autocast))
            stack.enter_context(_autocast_blocks(device))
            stack.enter_context(CudaIndexingMode())
            if emulated:  # a GPU build chooses the attention kernel itself
                stack.enter_context(CudaAttentionMode(GPUS[gpu]))
            stack.enter_context(_CastTagMode())
            stack.enter_context(answering(answers))
            mode.answers = answers
            try:
                # No decompositions: since torch 2.14 make_fx without a table records `detach` as `alias`.
                return make_fx(run, tracing_mode="fake", record_stack_traces=True, decomposition_table={})(
                    *traced_inputs
                )
            except TraceError:
                raise
            except Exception as exc:
                raise TraceError(_explain(exc, running[-1] if running else None, fn_or_module)) from exc

    unchecked: list[str] = []  # where a check on tensor values was skipped
    answers = None
    try:
        graph_module = traced(None)
    except TraceError as error:
        # Control flow on values: ask a real run on the CPU, then trace again with its answers.
        if not asks_for_values(error.__cause__):
            raise
        runnable = model
        if model is not None and real_model is not None:
            try:
                runnable = real_model(model)
            except Exception:  # too large to build on the CPU: its buffers get stand-ins too
                runnable = model
        answers = _real_answers(fn_or_module, runnable, call_args)
        if answers.failed is not None:
            raise TraceError(
                f"{error}\na run on the CPU to read those values raised: {answers.failed}"
            ) from error.__cause__
        try:
            graph_module = traced(answers)
        except TraceError as again:
            if not asks_for_values(again.__cause__):
                raise
            raise TraceError(
                f"{again}\na run on the CPU answered the trace's other questions about values, not this "
                "one: it took another path here"
            ) from again.__cause__
    gradients: dict[str, torch.fx.Node] = {}
    if backward:
        with relaxed_meta() if emulated else contextlib.nullcontext():
            graph_module, gradients = backward_graph(graph_module, tree_leaves(traced_inputs), trainable)
    graph, fx_nodes = _dtype_graph(
        graph_module,
        device=device,
        dtype=dtype,
        autocast=autocast,
        param_dtype=param_dtype,
        emulated=emulated,
    )
    graph.gpu = gpu if emulated else None
    graph.model = type(model).__name__ if model is not None else getattr(fn_or_module, "__qualname__", None)
    # The placeholders come in the order of the traced inputs' leaves, the model's state first.
    placeholders = [i for i, fx_node in enumerate(fx_nodes) if fx_node.op == "placeholder"]
    graph.parameters = {name: placeholders[index] for name, index in trainable.items()}
    if backward:
        position = {fx_node: i for i, fx_node in enumerate(fx_nodes)}
        graph.loss = losses[0]
        graph.gradients = {name: position[fx_node] for name, fx_node in gradients.items()}
    if answers is not None and answers.used:
        asked = ", ".join(f"{what} {count}x" for what, count in answers.used.most_common())
        count = answers.used.total()
        zeros = ", with random weights where the model was built without" if answers.stood_in else ""
        graph.notes.append(
            f"{count} value{'s' * (count != 1)} the model's control flow reads ({asked}) came from a run "
            f"on the CPU{zeros}"
        )
    if unchecked:
        places = ", ".join(dict.fromkeys(unchecked))
        graph.notes.append(f"checks on input values skipped (the trace's tensors hold no values): {places}")
    if outputs is not None:
        real_inputs = _real_inputs(model, call_args, param_dtype)
        if real_inputs is not None:
            outputs(replay_outputs(graph_module, real_inputs))
    if measure or values:
        real_inputs = _real_inputs(model, call_args, param_dtype)
        if backward and labels is not None and real_inputs is not None:
            real_inputs = (*real_inputs, labels)
        if real_inputs is None:
            note = "the model has no weights to replay with (built on the meta device: give --weights FILE)"
            graph.measure_note = note if measure else None
            graph.values_note = note if values else None
        else:
            if measure:
                from amplint.runtime.measure import measure as measure_errors

                measure_errors(graph, graph_module, fx_nodes, real_inputs, measure_lines or set())
            if values:
                from amplint.runtime.values import replay_values

                replay_values(graph, graph_module, fx_nodes, real_inputs, limits, max_memory)
    return graph


@contextmanager
def _fake_kernel_log_quiet() -> Iterator[None]:
    """A kernel that raises on fake tensors is logged by torch with its whole traceback before the
    error reaches us; the trace's own message says it once, with the model's line."""
    log = logging.getLogger(compat.FAKE_TENSOR_LOGGER)
    was = log.disabled
    log.disabled = True
    try:
        yield
    finally:
        log.disabled = was


@contextmanager
def _value_checks_skipped(places: list[str]) -> Iterator[None]:
    """`torch._check_tensor_all*` on a fake tensor (transformers' `torch_compilable_check` on an
    input's values: shapes that must fit, indices in range) cannot be decided without values, and
    does not change a dtype: it is skipped and its place noted. Checks on Python values still run."""
    real_with, real_all = compat.original_tensor_checks()

    def where() -> str:
        frames = traceback.extract_stack()[:-2]
        user = next(
            (f for f in reversed(frames) if "/torch/" not in f.filename and "import_utils" not in f.filename),
            None,
        )
        return f"{user.filename}:{user.lineno}" if user else "?"

    def check_with(error_type: Any, cond: Any, message: Any = None) -> None:
        if isinstance(cond, FakeTensor):
            places.append(where())
            return
        real_with(error_type, cond, message)

    def check_all(cond: Any, message: Any = None) -> None:
        if isinstance(cond, FakeTensor):
            places.append(where())
            return
        real_all(cond, message)

    with compat.patch_tensor_checks(check_with, check_all):
        yield


def _trainable(model: nn.Module) -> dict[str, int]:
    """The model's trainable floating-point parameters, by name: their position among its
    parameters and buffers, as the trace takes them."""
    return {
        name: index
        for index, (name, parameter) in enumerate(model.named_parameters())
        if parameter.requires_grad and parameter.is_floating_point()
    }


def _traceable(output: Any) -> Any:
    """The output with what make_fx cannot return (a key/value cache object) replaced by None."""
    return tree_map(lambda v: v if isinstance(v, (torch.Tensor, *_PLAIN)) else None, output)


_PLAIN = (int, float, bool, str, type(None))


class _NoWeights(Exception):
    """A tensor on the meta device: there are no values to replay."""


def _real_answers(traced: Callable[..., Any] | nn.Module, model: nn.Module | None, call_args: Any) -> Answers:
    """The answers of one real CPU run (`amplint.runtime.oracle`) with the traced inputs, and the
    model's weights or stand-ins where it has none."""
    inputs = tree_map(lambda v: v.detach().cpu() if isinstance(v, torch.Tensor) else v, call_args)
    positional, keywords = _made(inputs, "cpu", None)
    if model is None:
        return record(lambda: traced(*positional, **keywords))
    own = dict((*model.named_parameters(), *model.named_buffers()))
    state = stand_in_weights(own)
    answers = record(lambda: torch.func.functional_call(model, state, positional, keywords))
    answers.stood_in = any(t.is_meta for t in own.values())
    return answers


def _real_inputs(model: nn.Module | None, call_args: Any, param_dtype: torch.dtype | None) -> Any:
    """The traced inputs as real CPU tensors, in the structure `make_fx` saw; None for a model
    without weights."""

    def real(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if value.is_meta:
            raise _NoWeights
        value = value.detach().cpu()
        return value.to(param_dtype) if param_dtype is not None and value.is_floating_point() else value

    try:
        args = tree_map(real, call_args)
        if model is None:
            return (args,)
        state = {name: real(t) for name, t in (*model.named_parameters(), *model.named_buffers())}
        return (state, args)
    except _NoWeights:
        return None


def _explain(exc: Exception, module: str | None, traced: object) -> str:
    """Why the trace stopped: the torch op, the line of the model's source that called it and the
    module running it, then the reason. A call that failed before any line of the model ran (a
    forward given the wrong inputs) names where that forward is defined."""
    text = f"{type(exc).__name__}: {exc}".strip()
    op = getattr(exc, _OP, None)
    frame = user_frame(exc)
    where = f"{frame.filename}:{frame.lineno}" if frame else f"the call of {_defined_at(traced)}"
    head = f"cannot trace {op or 'the model'} called at {where}"
    if frame:
        head += f" in {frame.name}()"
    if module:
        head += f" (module {module})"
    lines = [head]
    if frame and frame.line:
        lines.append(f"    {frame.line.strip()}")
    if (
        "data-dependent" in text
        or "GuardOnDataDependentSymNode" in text
        or "DataDependentOutputException" in text
    ):
        lines.append(
            "the model's control flow depends on tensor values, which fake tensors do not have.\n"
            "Make the branch depend on shapes or configuration, or trace a function that skips it."
        )
    if "not linked with support for cuda" in text:
        lines.append(
            "this call needs a CUDA build of torch, and amplint's CUDA emulation does not cover it yet: "
            "trace with --device cpu, or report it with the line above."
        )
    if "Unsupported dtype BFloat16" in text and "fft" in str(op):
        lines.append(
            "cuFFT takes float16, float32 and float64 but not bfloat16, and autocast does not upcast an "
            "FFT: the model raises here on a GPU too. Cast the FFT's input to float32 (x.float())."
        )
    lines.append(f"({text.splitlines()[0] if text else type(exc).__name__})")
    return "\n".join(lines)


def _defined_at(traced: object) -> str:
    function = getattr(type(traced), "forward", None) if isinstance(traced, nn.Module) else traced
    name = getattr(function, "__qualname__", type(traced).__name__)
    try:
        return f"{name} ({inspect.getsourcefile(function)}:{inspect.getsourcelines(function)[1]})"  # type: ignore[arg-type]
    except (TypeError, OSError):
        return name


def _dtype_graph(
    graph_module: torch.fx.GraphModule,
    *,
    device: str,
    dtype: torch.dtype,
    autocast: bool,
    param_dtype: torch.dtype | None,
    emulated: bool,
) -> tuple[DtypeGraph, list[torch.fx.Node]]:
    """The dtype graph, and the fx node of each of its nodes (in id order)."""
    ids: dict[torch.fx.Node, int] = {}
    nodes: list[DtypeNode] = []
    for fx_node in graph_module.graph.nodes:
        if fx_node.op not in {"placeholder", "call_function"}:
            continue
        if fx_node.target is operator.getitem and not fx_node.users:
            continue  # an output of a multi-output op that nothing reads
        value = first_tensor(fx_node.meta.get("val"))
        out_dtype = value.dtype if isinstance(value, torch.Tensor) else None
        producers = [p for p in fx_node.all_input_nodes if p in ids]
        custom = fx_node.meta.get("custom") or {}
        if fx_node.op == "placeholder":
            op, target, policy = "input", "placeholder", "input"
        else:
            target_op = fx_node.target
            packet = getattr(target_op, "overloadpacket", target_op)
            op = getattr(packet, "__name__", str(target_op))
            target = str(target_op)
            # Inside a user's autocast block, that block's state decides (see _autocast_blocks);
            # the backward runs without autocast.
            backward = custom.get(PHASE) == "backward"
            block = custom.get("amplint_autocast")
            node_autocast = not backward and (autocast if block is None else block != "off")
            node_dtype = getattr(torch, block) if block not in (None, "off") else dtype
            if op in _CAST_OPS:
                if custom.get("amplint_user_cast"):
                    policy = "explicit_cast"
                else:
                    # Autocast only ever casts one floating dtype to another; torch's own code
                    # casts masks and indices too, and those are no autocast casts. In the backward
                    # such a cast is the gradient of one.
                    source_dtype = nodes[ids[producers[0]]].dtype if producers else None
                    floating = (
                        source_dtype in FLOATING
                        and dtype_name(out_dtype) in FLOATING
                        and source_dtype != dtype_name(out_dtype)
                    )
                    policy = (
                        "autograd_cast"
                        if floating and backward
                        else "autocast_cast"
                        if floating and node_autocast
                        else "inherited"
                    )
            elif isinstance(target_op, OpOverload):
                casts = [nodes[ids[p]].dtype for p in producers if nodes[ids[p]].policy == "autocast_cast"]
                policy = classify(
                    target_op,
                    out_dtype,
                    [getattr(torch, c) for c in casts if c],
                    device=device,
                    autocast_dtype=node_dtype,
                    autocast=node_autocast,
                )
            else:
                policy = "inherited"
        ids[fx_node] = len(nodes)
        nodes.append(
            DtypeNode(
                id=len(nodes),
                op=op,
                target=target,
                dtype=dtype_name(out_dtype),
                input_dtypes=[nodes[ids[p]].dtype for p in producers],
                shape=list(value.shape) if isinstance(value, torch.Tensor) else None,
                policy=policy,
                # The loss is amplint's code: no line of the model computes it.
                source=None
                if custom.get("amplint_module") == LOSS_MODULE
                else source_of(fx_node.meta.get("stack_trace")),
                module=custom.get("amplint_module"),
                inputs=[ids[p] for p in producers],
                attention=custom.get("amplint_attention"),
                phase="backward" if custom.get(PHASE) == "backward" else "forward",
            )
        )
    graph = DtypeGraph(
        nodes=nodes,
        device=device,
        dtype=dtype_name(dtype) or "",
        autocast=autocast,
        param_dtype=dtype_name(param_dtype),
        torch_version=torch.__version__,
        emulated=emulated,
    )
    return graph, list(ids)


def replay(
    model: torch.nn.Module,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    device: str = "cuda",
    dtype: torch.dtype = torch.bfloat16,
    autocast: bool = True,
    param_dtype: torch.dtype | None = None,
    weights: str | Path | Mapping[str, torch.Tensor] | None = None,
    graph: DtypeGraph | None = None,
    limits: ValueLimits | None = None,
    max_memory: int | None = None,
) -> DtypeGraph:
    """Trace `model(*args, **kwargs)` as `trace` does and replay the graph on its real values: the
    returned graph's `values` hold each op's statistics, and its findings come from AMP105-AMP108.

    `weights`: a `.safetensors` file, a saved state dict or a state dict, loaded into the model first
    (names and shapes must match). `graph`: a saved trace to replay again: its device, dtype and
    autocast settings are used, and a graph saved by another torch version is compared op by op
    with this one's (the differences are in `values.notes`). `max_memory`: bytes the replay may use
    beyond the weights (default: the memory available); a replay estimated to need more raises
    `ReplayError` before it starts."""
    if weights is not None:
        from amplint.runtime.weights import load_weights

        load_weights(model, weights)
    if graph is not None:
        device, dtype, autocast = graph.device, getattr(torch, graph.dtype), graph.autocast
        param_dtype = getattr(torch, graph.param_dtype) if graph.param_dtype else None
    replayed = trace(
        model,
        args,
        kwargs,
        device=device,
        dtype=dtype,
        autocast=autocast,
        param_dtype=param_dtype,
        values=True,
        limits=limits,
        max_memory=max_memory,
    )
    if graph is not None and replayed.values is not None:
        replayed.values.notes.extend(replayed.differences_from(graph))
    return replayed
