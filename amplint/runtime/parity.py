"""A trace checked against a real run of the same model under `torch.autocast`.

The real run is recorded by a dispatch mode that sees each aten op with its real output,
independent of make_fx and of the trace's graph building; both sides are then read per line of the
user's source. On CPU autocast this runs anywhere; for CUDA it needs a GPU, where it shows whether
the emulation (fake `cuda:0` tensors on a CPU-only build) gives every op the dtype a GPU gives it.
"""

from __future__ import annotations

import traceback
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from amplint.runtime.compat import TorchDispatchMode
from amplint.runtime.graph import DtypeGraph
from amplint.runtime.target import is_user_code

__all__ = ["Parity", "compare", "real_run"]

Line = tuple[str, int]  # (source path, line)
Ops = list[tuple[str, str | None]]  # (aten op, first output's dtype) in the order they ran

_FLOATING = {"float16", "bfloat16", "float32", "float64"}
_ELIDED_VIEWS = {"slice", "alias"}
_CONSTANTS = {"lift_fresh": "full", "lift_fresh_copy": "full"}
_ATTENTION = {
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
}


class _Recorder(TorchDispatchMode):
    """Every aten op of a real run: name and first output dtype, by the user's source line."""

    def __init__(self, skipped: Sequence[str]) -> None:
        super().__init__()
        self.skipped = tuple(skipped)
        self.ops: dict[Line, Ops] = defaultdict(list)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        first = out[0] if isinstance(out, (tuple, list)) and out else out
        dtype = str(first.dtype).removeprefix("torch.") if isinstance(first, torch.Tensor) else None
        user = [
            f
            for f in traceback.extract_stack()
            if is_user_code(f.filename) and not (self.skipped and f.filename.startswith(self.skipped))
        ]
        if user:
            self.ops[(user[-1].filename, user[-1].lineno or 0)].append((func.overloadpacket.__name__, dtype))
        return out


def real_run(
    model: Any,
    args: Sequence[Any],
    kwargs: dict[str, Any],
    dtype: torch.dtype,
    device: str,
    skipped: Sequence[str] = (),
) -> dict[Line, Ops]:
    """The ops of `model(*args, **kwargs)` run under `torch.autocast(device, dtype)`, by line;
    frames in files under `skipped` (a test's own file) count as library code."""
    recorder = _Recorder(skipped)
    with torch.no_grad(), torch.autocast(device, dtype=dtype), recorder:
        model(*args, **kwargs)
    return recorder.ops


def _by_line(graph: DtypeGraph) -> dict[Line, Ops]:
    lines: dict[Line, Ops] = defaultdict(list)
    for node in graph.nodes:
        if node.policy != "input" and node.op != "getitem" and node.source is not None:
            lines[(node.source.path, node.source.line)].append((node.op, node.dtype))
    return lines


def _comparable(ops: Ops) -> Ops:
    # On a line that calls fused attention, the mask preparation around the kernel differs between
    # backends; the kernel's own output dtype is what counts.
    attention = [(op, dtype) for op, dtype in ops if op in _ATTENTION]
    if attention:
        return [("attention", attention[0][1])]
    # Autocast decides floating-point dtypes only; integer and boolean bookkeeping (mask building)
    # may take value-dependent shortcuts in a real run. Eager indexing skips a full slice
    # (`x[:, i]`) or answers it with an alias where tracing records it, and a view keeps its
    # input's dtype, so neither side's views say anything. A tensor made from a Python constant
    # is `lift_fresh` in a real run and `full` or a lifted copy in a trace.
    return [
        (_CONSTANTS.get(op, op), dtype) for op, dtype in ops if dtype in _FLOATING and op not in _ELIDED_VIEWS
    ]


@dataclass
class Parity:
    """How a trace and a real run compare, line by line."""

    lines: int = 0  # lines both ran
    ops: int = 0  # ops the real run ran on them
    mismatched: dict[Line, tuple[Ops, Ops]] = field(default_factory=dict)  # (traced, real)
    # Lines with floating-point ops that only one side ran: a path chosen on tensor values (a
    # real run that sees no padding drops the mask) that the trace cannot see.
    one_sided: dict[Line, Ops] = field(default_factory=dict)


def compare(graph: DtypeGraph, real: dict[Line, Ops]) -> Parity:
    traced = {k: _comparable(v) for k, v in _by_line(graph).items()}
    ran = {k: _comparable(v) for k, v in real.items()}
    parity = Parity()
    for key in traced.keys() ^ ran.keys():
        ops = traced.get(key, ran.get(key, []))
        if ops:
            parity.one_sided[key] = ops
    for key in traced.keys() & ran.keys():
        parity.lines += 1
        parity.ops += len(ran[key])
        if traced[key] != ran[key]:
            parity.mismatched[key] = (traced[key], ran[key])
    return parity
