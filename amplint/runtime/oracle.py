"""Answers to the questions about tensor values that fake tensors cannot answer.

A model may branch on values (`if lengths.max() > n`), loop over them (`for t, h, w in
grid_thw.tolist()`), or size a tensor by them (`nonzero`, `repeat_interleave` by counts, padding
computed from a tensor). Fake tensors have shapes and dtypes but no values, so such a trace stops.
When it does, the model is run once for real on the CPU, with its own weights or, for a model built
without weights, small random ones (the questions are mostly about the inputs: sizes, lengths, grids),
and every value read and every data-dependent shape is recorded under the line of the model that
asked, in the order asked. The trace is then run again and each question is answered from that
record: the same line asking for the n-th time gets the n-th answer. A question the record does not
hold (the CPU run took another path there) stops the trace as before.
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any
from unittest import mock

import torch
from torch.autograd import grad_mode
from torch.overrides import TorchFunctionMode

from amplint.runtime.compat import (
    DataDependentOutputException,
    DisableTorchFunction,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
    TorchDispatchMode,
    disable_current_modes,
)
from amplint.runtime.cuda_indexing import _treat_sequence_as_tuple
from amplint.runtime.target import is_user_code, user_frame

__all__ = ["AnsweringFakeTensorMode", "Answers", "answering", "asks_for_values", "record", "stand_in_weights"]

aten = torch.ops.aten
Key = tuple[str, int, str]  # (file, line, what was asked)

# Python-level reads of a tensor's values.
_READS: dict[Any, str] = {
    torch.Tensor.item: "item",
    torch.Tensor.tolist: "tolist",
    torch.Tensor.__bool__: "bool",
    torch.Tensor.__int__: "int",
    torch.Tensor.__float__: "float",
    torch.Tensor.__index__: "index",
}
# Calls whose C++ binding reads the values of the tensors nested in sequences of their data (or
# index) itself, with every mode off: `torch.tensor([0, n])`, `x[(i, j), (k, l)]`. The argument
# that holds them, by position and name.
_NESTED_READS: dict[Any, tuple[int, str]] = {
    torch.tensor: (0, "data"),
    torch.as_tensor: (0, "data"),
    torch.Tensor.new_tensor: (1, "data"),
    torch.Tensor.__getitem__: (1, "index"),
    torch.Tensor.__setitem__: (1, "index"),
}
# Ops whose output shape depends on values, and the scalar read that C++ code does itself.
_DYNAMIC = {
    aten._local_scalar_dense.default,
    aten.nonzero.default,
    aten.repeat_interleave.Tensor,
    aten.masked_select.default,
    aten._unique2.default,
    aten.unique_dim.default,
    aten.unique_consecutive.default,
    aten.index.Tensor,
}


def _asker() -> tuple[str, int]:
    """The innermost line of the model's code on the stack."""
    frame = sys._getframe(2)
    while frame is not None:
        if is_user_code(frame.f_code.co_filename):
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back  # type: ignore[assignment]
    return "?", 0


class Answers:
    """What a real run answered, per (line, question), in the order asked."""

    def __init__(self) -> None:
        self.recorded: dict[Key, deque[Any]] = defaultdict(deque)
        self.used: Counter[str] = Counter()  # answers given, by what was asked
        self.stood_in = False  # the run had stand-ins for weights the model was built without
        self.failed: str | None = None  # why the run raised, if it did

    def put(self, what: str, value: Any) -> None:
        self.recorded[(*_asker(), what)].append(value)

    def take(self, what: str) -> tuple[bool, Any]:
        queue = self.recorded.get((*_asker(), what))
        if not queue:
            return False, None
        self.used[what.removeprefix("aten::").split(".")[0].lstrip("_")] += 1
        return True, queue.popleft()


class _Reads(TorchFunctionMode):
    """Records (with `answers` being filled) or answers (for fake tensors) the Python-level reads."""

    def __init__(self, answers: Answers, recording: bool) -> None:
        super().__init__()
        self.answers, self.recording = answers, recording
        self.inside = 0  # a read in progress: the scalar reads under it are part of it

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _NESTED_READS:
            return self._nested(func, args, kwargs)
        what = _READS.get(func)
        if what is None or not args or not isinstance(args[0], torch.Tensor):
            return func(*args, **kwargs)
        if not self.recording:
            if isinstance(args[0], FakeTensor):
                found, value = self.answers.take(what)
                if found:
                    return value
            return func(*args, **kwargs)
        self.inside += 1
        try:
            value = func(*args, **kwargs)
        finally:
            self.inside -= 1
        if what == "tolist":  # a fake tensor's `tolist` reads its elements one `item` at a time
            for element in _flat(value):
                self.answers.put("item", element)
        else:
            self.answers.put(what, value)
        return value

    def _nested(self, func: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        """A call of `_NESTED_READS`: no mode sees the binding read its nested tensors, so a real run
        records their values here, one `item` each, and the trace gives the binding real tensors
        holding them (of the same dtypes: a tensor's dtype decides the data's)."""
        position, name = _NESTED_READS[func]
        keyword = name in kwargs
        if not keyword and len(args) <= position:
            return func(*args, **kwargs)
        given = kwargs[name] if keyword else args[position]
        # An index's own tensors index; the tensors in its sequences are values.
        data = _in_index(given, self._read) if name == "index" else _in_data(given, self._read)
        if data is not given:
            if keyword:
                kwargs = {**kwargs, name: data}
            else:
                args = (*args[:position], data, *args[position + 1 :])
        return func(*args, **kwargs)

    def _read(self, tensor: torch.Tensor) -> torch.Tensor:
        if tensor.numel() != 1:  # the binding raises its own error
            return tensor
        if self.recording:
            self.inside += 1
            try:
                self.answers.put("item", tensor.item())
            finally:
                self.inside -= 1
            return tensor
        found, value = self.answers.take("item")
        if not found:
            if not isinstance(tensor, FakeTensor):
                return tensor
            # Says that the value is data-dependent, so that the trace asks a real run (or gives
            # the value the trace knows).
            value = aten._local_scalar_dense.default(tensor)
        with DisableTorchFunction(), disable_current_modes():
            return torch.tensor(value, dtype=tensor.dtype)


def _in_data(data: Any, read: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """`data` with each tensor in its (nested) lists and tuples replaced by `read` of it; `data`
    itself where it holds none."""
    if not isinstance(data, (list, tuple)):
        return data
    return _rebuilt(
        data, [read(item) if isinstance(item, torch.Tensor) else _in_data(item, read) for item in data]
    )


def _in_index(index: Any, read: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """An index with the tensors that torch turns into index values (those in its sequences)
    replaced by `read` of each; a sequence taken as a tuple of indices as torch takes it."""
    if not _treat_sequence_as_tuple(index):
        return _in_data(index, read)
    return _rebuilt(index, [_in_data(item, read) for item in index])


def _rebuilt(sequence: Any, items: list[Any]) -> Any:
    """`sequence` itself where none of its items changed, else `items` as a list or a tuple as it was."""
    if all(new is old for new, old in zip(items, sequence, strict=True)):
        return sequence
    return items if isinstance(sequence, list) else tuple(items)


def _flat(value: Any) -> Iterator[Any]:
    if isinstance(value, list):
        for item in value:
            yield from _flat(item)
    else:
        yield value


class _Ops(TorchDispatchMode):
    """Records the scalar reads and data-dependent shapes of a real run's ops."""

    def __init__(self, answers: Answers, reads: _Reads) -> None:
        super().__init__()
        self.answers, self.reads = answers, reads

    def __torch_dispatch__(self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func is aten._local_scalar_dense.default:
            if not self.reads.inside:
                self.answers.put(func.name(), out)
        elif _sized_by_values(func, args):
            outs = [out] if isinstance(out, torch.Tensor) else [t for t in out if isinstance(t, torch.Tensor)]
            self.answers.put(func.name(), [(t.shape, t.dtype) for t in outs])
        return out


def _sized_by_values(func: Any, args: Sequence[Any]) -> bool:
    """Whether the op's output shape depends on its inputs' values."""
    if func is aten.index.Tensor:  # with a boolean mask among the indices; integer ones give their shape
        return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in args[1])
    return func in _DYNAMIC


class AnsweringFakeTensorMode(FakeTensorMode):
    """A FakeTensorMode that answers data-dependent ops from `answers` (when set) instead of
    refusing them: a scalar read gets the recorded value, an op with a value-dependent output
    shape gets fake outputs of the recorded shapes on the input's device."""

    answers: Answers | None = None

    def dispatch(self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None) -> Any:
        if func is not aten._local_scalar_dense.default and _sized_by_values(func, args):
            # Answered before the fake kernel runs: on a fake CUDA device some of them need CUDA.
            if self.answers is None:
                raise DynamicOutputShapeException(func)
            found, value = self.answers.take(func.name())
            if not found:
                raise DynamicOutputShapeException(func)
            return self._shaped(value, args)
        try:
            return super().dispatch(func, types, args, kwargs or {})
        except (DataDependentOutputException, DynamicOutputShapeException):
            if self.answers is None or func is not aten._local_scalar_dense.default:
                raise
            found, value = self.answers.take(func.name())
            if not found:
                raise
            return value

    def _shaped(self, value: list[tuple[torch.Size, torch.dtype]], args: Sequence[Any]) -> Any:
        """Fake outputs of the recorded shapes and dtypes, on the inputs' device."""
        device = next(a.device for a in args if isinstance(a, torch.Tensor))
        with self:
            outs = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in value]
        return outs[0] if len(outs) == 1 else tuple(outs)


def asks_for_values(exc: BaseException | None) -> bool:
    """Whether a trace stopped on a question about values."""
    while exc is not None:
        if isinstance(exc, (DataDependentOutputException, DynamicOutputShapeException)):
            return True
        text = str(exc)
        if "data-dependent" in text or "DataDependentOutputException" in text:
            return True
        exc = exc.__cause__
    return False


@contextmanager
def answering(answers: Answers | None) -> Iterator[None]:
    """While a trace runs: its Python-level reads of fake tensors answered from `answers`. Without
    answers, the reads that no mode would see still ask, so that the trace stops on them."""
    with _Reads(answers or Answers(), recording=False):
        yield


def record(run: Callable[[], Any]) -> Answers:
    """The answers of one real run of `run`; where it raises, `failed` says why (the trace's own
    error then stands, with that reason beside it)."""
    answers = Answers()
    reads = _Reads(answers, recording=True)
    try:
        with torch.no_grad(), _no_inference_mode(), reads, _Ops(answers, reads):
            run()
    except Exception as exc:
        frame = user_frame(exc)
        where = f" at {frame.filename}:{frame.lineno}" if frame else ""
        answers.failed = f"{type(exc).__name__}{where}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return answers


@contextmanager
def _no_inference_mode() -> Iterator[None]:
    """`torch.inference_mode` left off (the run is under `no_grad` already): in it, a tensor an op
    reads as a number (`torch.arange(0, height)`) is read without a dispatch, which goes unrecorded
    (SAM3 Video's forward runs in inference mode)."""
    with (
        mock.patch.object(grad_mode.inference_mode, "__enter__", lambda self: None),
        mock.patch.object(grad_mode.inference_mode, "__exit__", lambda self, *exc: None),
    ):
        yield


# Stand-ins for a weight up to this many elements are real. A larger stack of matrices (MoE
# experts) is one real matrix broadcast over the stack: ops that check a matrix's strides
# (`grouped_mm`) read only its last two dimensions. Any other larger one (an embedding) is one zero
# broadcast to its shape, which takes no memory but which such ops refuse.
_REAL = 2**24


def stand_in_weights(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Real CPU tensors for a model's state: its own values, or for what was built on the meta
    device small random ones (normal, std 0.02, seeded: zeros would tie every router and threshold)."""
    generator = torch.Generator().manual_seed(0)

    def stand_in(t: torch.Tensor) -> torch.Tensor:
        if t.numel() > _REAL and t.dim() > 2 and t.is_floating_point() and t.shape[-2:].numel() <= _REAL:
            return stand_in(torch.empty(t.shape[-2:], dtype=t.dtype, device="meta")).expand(t.shape)
        if t.numel() > _REAL:
            return torch.zeros((), dtype=t.dtype).expand(t.shape)
        if not t.is_floating_point():
            return torch.zeros(t.shape, dtype=t.dtype)
        return (torch.randn(t.shape, generator=generator) * 0.02).to(t.dtype)

    return {name: stand_in(t) if t.is_meta else t.detach().cpu() for name, t in state.items()}
