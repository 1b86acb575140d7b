"""The limits of the floating dtypes as numbers: what rules compare a hand-written constant against,
and what the dtype-facts engine gives `torch.finfo(torch.float32).min` and its like."""

from __future__ import annotations

from amplint.static.ops import BF16, F16, F32, F64

FP16_MAX = 65504.0
# Magnitudes from here on round to inf in float16 (65504 plus half a unit in the last place).
FP16_OVERFLOW = 65520.0
# Positive values at or below this (2**-25) round to zero in float16, whose smallest subnormal is
# 2**-24 (about 5.96e-8) and smallest normal number 2**-14 (about 6.1e-5).
FP16_FLUSH = 2.0**-25
BF16_MAX = 3.3895313892515355e38

# `torch.finfo(dtype)`'s largest value, epsilon and smallest normal number (`tiny`).
_FINFO = {
    F16: (FP16_MAX, 2.0**-10, 2.0**-14),
    BF16: (BF16_MAX, 2.0**-7, 2.0**-126),
    F32: (3.4028234663852886e38, 2.0**-23, 2.0**-126),
    F64: (1.7976931348623157e308, 2.0**-52, 2.0**-1022),
}


def finfo(dtype: str, attribute: str) -> float | None:
    """`torch.finfo(dtype).<attribute>` for `min`, `max`, `eps`, `tiny`, `smallest_normal`."""
    limits = _FINFO.get(dtype)
    if limits is None:
        return None
    largest, eps, tiny = limits
    return {"min": -largest, "max": largest, "eps": eps, "tiny": tiny, "smallest_normal": tiny}.get(attribute)
