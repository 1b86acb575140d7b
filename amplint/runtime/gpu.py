"""The GPU a trace emulates: what `torch.cuda` answers about the device, and what its kernels allow.

Models ask the device before they pick a path (MoE routers read the compute capability, autocast
asks whether bf16 is supported); on a CPU-only build those questions raise. While a trace runs,
:func:`emulated` answers them as the chosen GPU would.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any
from unittest import mock

from amplint.runtime.target import is_user_code

__all__ = ["DEFAULT_GPU", "GPUS", "Gpu", "emulated"]


@dataclass(frozen=True)
class Gpu:
    key: str
    name: str  # as `torch.cuda.get_device_name` reports it
    capability: tuple[int, int]
    memory_gib: int
    multiprocessors: int

    @property
    def native_bf16(self) -> bool:
        """bf16 tensor cores and kernels: compute capability 8.0 or newer (Ampere)."""
        return self.capability >= (8, 0)

    @property
    def sm(self) -> str:
        return f"sm{self.capability[0]}{self.capability[1]}"

    def properties(self) -> Any:
        """What `torch.cuda.get_device_properties` returns, for the fields models read."""
        major, minor = self.capability
        return SimpleNamespace(
            name=self.name,
            major=major,
            minor=minor,
            total_memory=self.memory_gib * 1024**3,
            multi_processor_count=self.multiprocessors,
            is_integrated=False,
            is_multi_gpu_board=False,
            warp_size=32,
            gcnArchName="",
        )


GPUS: dict[str, Gpu] = {
    "v100": Gpu("v100", "Tesla V100-SXM2-32GB", (7, 0), 32, 80),
    "t4": Gpu("t4", "Tesla T4", (7, 5), 16, 40),
    "a100": Gpu("a100", "NVIDIA A100-SXM4-80GB", (8, 0), 80, 108),
    "h100": Gpu("h100", "NVIDIA H100 80GB HBM3", (9, 0), 80, 132),
}
DEFAULT_GPU = "a100"


# Where the model's code asked `torch.cuda.is_bf16_supported()` in the traces of this process
# (file, line): a dtype it picks by the answer is the code's choice, not the trace's.
BF16_ASKED: list[tuple[str, int]] = []


class _OneDevice:
    """`torch.cuda.device(index)` and `device_of(tensor)` on the one emulated device: always current."""

    def __init__(self, device: Any) -> None:
        self.idx = 0

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


@contextmanager
def emulated(gpu: Gpu) -> Iterator[None]:
    """`torch.cuda`'s device questions answered as `gpu` would answer them (one device, index 0)."""

    def bf16_supported(including_emulation: bool = True) -> bool:
        # Before sm80, torch answers True when bf16 can be emulated (it can), False otherwise.
        caller = sys._getframe(1)
        while caller is not None and not is_user_code(caller.f_code.co_filename):
            caller = caller.f_back  # type: ignore[assignment]
        if caller is not None:
            BF16_ASKED.append((caller.f_code.co_filename, caller.f_lineno))
        return gpu.native_bf16 or including_emulation

    answers: dict[str, Any] = {
        "get_device_capability": lambda device=None: gpu.capability,
        "get_device_properties": lambda device=None: gpu.properties(),
        "get_device_name": lambda device=None: gpu.name,
        "is_bf16_supported": bf16_supported,
        "get_arch_list": lambda: [gpu.sm],
        # Device management, which a CPU-only build refuses: a kernel's guard (`with
        # torch.cuda.device(x.device.index)`, flash-linear-attention's `input_guard`) changes no value.
        "device": _OneDevice,
        "device_of": _OneDevice,
        "current_device": lambda: 0,
        "device_count": lambda: 1,
        "set_device": lambda device: None,
        "synchronize": lambda device=None: None,
    }
    with ExitStack() as stack:
        for name, answer in answers.items():
            stack.enter_context(mock.patch(f"torch.cuda.{name}", answer))
        yield
