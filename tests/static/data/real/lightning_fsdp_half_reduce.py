# ruff: noqa
# fmt: off
# Source: lightning 2.6.6 (PyPI), lightning/pytorch/plugins/precision/fsdp.py, lines 17, 27, 29-30,
# 37 and 94-117 (the rest of the class left out, the property verbatim).
# "16-mixed" and "bf16-mixed" reduce gradients and keep buffers in the half dtype.
import torch
from lightning.fabric.utilities import rank_zero_warn
from lightning.pytorch.plugins.precision.precision import Precision
from lightning.pytorch.utilities.exceptions import MisconfigurationException


class FSDPPrecision(Precision):
    @property
    def mixed_precision_config(self) -> "TorchMixedPrecision":
        from torch.distributed.fsdp.fully_sharded_data_parallel import MixedPrecision as TorchMixedPrecision

        if self.precision in ("16-true", "bf16-true"):
            rank_zero_warn(
                f"FSDP with `{self.precision}` enables computation in lower precision. "
                "FSDP will always retain a full-precision copy of the model parameters for sharding."
            )

        if self.precision in ("16-true", "16-mixed"):
            param_dtype = reduce_dtype = buffer_dtype = torch.float16
        elif self.precision in ("bf16-true", "bf16-mixed"):
            param_dtype = reduce_dtype = buffer_dtype = torch.bfloat16
        elif self.precision == "32-true":
            param_dtype = reduce_dtype = buffer_dtype = torch.float32
        else:
            raise MisconfigurationException(f"Was unable to infer precision type, received {self.precision!r}.")

        return TorchMixedPrecision(
            param_dtype=param_dtype,
            reduce_dtype=reduce_dtype,  # expect: AMP020
            buffer_dtype=buffer_dtype,  # expect: AMP020
        )
