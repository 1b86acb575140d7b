"""What rounding to a floating-point format does to values of a given magnitude: when an update is
too small to change a weight, and which loss scales keep float16 gradients from flushing to zero or
overflowing. Plain data about the formats and arithmetic on binades (`Magnitudes`), no torch: the
report and AMP111 share it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from amplint.runtime.graph import Magnitudes
from amplint.runtime.numbers import share


@dataclass(frozen=True)
class Format:
    precision: int  # significand bits, the implicit leading one included
    min_exponent: int  # the binade of the smallest normal number: 2^min_exponent
    max_exponent: int  # the binade of the largest finite number


FORMATS = {
    "float64": Format(53, -1022, 1023),
    "float32": Format(24, -126, 127),
    "bfloat16": Format(8, -126, 127),
    "float16": Format(11, -14, 15),
}
# float16's smallest subnormal is 2^-24: a gradient below it is flushed to zero.
FLOAT16_TINIEST = FORMATS["float16"].min_exponent - FORMATS["float16"].precision + 1
# torch.amp.GradScaler's defaults: init_scale 2^16, growth_factor 2 after growth_interval steps
# without inf or NaN, backoff_factor 0.5 (and the step skipped) on one.
GRAD_SCALER_INIT = 16
GRAD_SCALER_INTERVAL = 2000
# The share of non-zero gradient elements a loss scale may leave flushed to zero.
SPARE = 0.001


def largest(dtype: str) -> float | None:
    """The largest finite value of a format (65504 for float16); None for a dtype not in `FORMATS`."""
    found = FORMATS.get(dtype)
    return None if found is None else (2.0 - 2.0 ** (1 - found.precision)) * 2.0**found.max_exponent


def lost_from(dtype: str, lr: float) -> int:
    """The binade from which an update of `lr` rounds away in `dtype`: half an ulp of |w| exceeds
    it for every |w| >= 2^result (a normal 2^e has an ulp of 2^(e - precision + 1), a subnormal
    the smallest normal's)."""
    fmt = FORMATS[dtype]
    first = math.frexp(lr)[1] + fmt.precision
    # Below half the subnormals' ulp: the update rounds away from every non-zero value.
    return first if first > fmt.min_exponent else fmt.min_exponent - fmt.precision


def lost_updates(weights: Magnitudes, dtype: str, lr: float) -> int:
    """The elements a step of `lr` away from zero cannot change in `dtype` (toward zero too, but
    for a weight that is a power of two, whose binade below has half its ulp). Zeros change."""
    return weights.nonzero - weights.below(lost_from(dtype, lr))


@dataclass(frozen=True)
class LossScale:
    """What float16 makes of a set of gradients (their exact values): the share of non-zero
    elements it flushes to zero unscaled, the share below its normal range (kept with fewer bits),
    and the powers of two between which a loss scale keeps all but `SPARE` of them from flushing
    (`lowest`) and every one from overflowing (`highest`); None for gradients that are all zero."""

    counts: Magnitudes
    flushed: float
    subnormal: float
    lowest: int | None
    highest: int | None

    def flushed_at(self, scale: int) -> float:
        """The share of non-zero elements still flushed to zero at a loss scale of 2^scale."""
        return self.counts.below(FLOAT16_TINIEST - scale) / max(self.counts.nonzero, 1)


def loss_scale(gradients: Magnitudes) -> LossScale:
    """What float16 makes of `gradients` (see `LossScale`)."""
    nonzero = gradients.nonzero
    flushed = gradients.below(FLOAT16_TINIEST) / max(nonzero, 1)
    subnormal = gradients.below(FORMATS["float16"].min_exponent) / max(nonzero, 1)
    if not nonzero:
        return LossScale(gradients, 0.0, 0.0, None, None)
    smallest, largest = min(gradients.exponents), max(gradients.exponents)
    allowed = SPARE * nonzero
    # Scaling by 2^k moves every element k binades up: the first k that lifts enough of them.
    lowest = next(
        k
        for k in range(FLOAT16_TINIEST - largest, FLOAT16_TINIEST - smallest + 1)
        if gradients.below(FLOAT16_TINIEST - k) <= allowed
    )
    highest = FORMATS["float16"].max_exponent - largest
    return LossScale(gradients, flushed, subnormal, lowest, highest)


def grad_scaler(scale: LossScale) -> str:
    """What torch.amp.GradScaler's defaults make of these gradients, in words."""
    if scale.lowest is None or scale.highest is None:
        return "every gradient element is zero: there is nothing to scale"
    bounds = (
        f"a loss scale of at least 2^{scale.lowest} keeps all but {SPARE:.1%} of the non-zero gradient "
        f"elements from flushing to zero in float16, and at most about 2^{scale.highest} keeps the "
        "largest from overflowing"
    )
    if scale.lowest > scale.highest:
        return (
            f"{bounds}: no single loss scale does both, the gradients span more than float16's "
            f"range; at 2^{scale.highest} {share(scale.flushed_at(scale.highest))} still flush. Train in "
            "bfloat16, whose range is float32's"
        )
    init = f"GradScaler's initial 2^{GRAD_SCALER_INIT}"
    if scale.lowest > GRAD_SCALER_INIT:
        steps = (scale.lowest - GRAD_SCALER_INIT) * GRAD_SCALER_INTERVAL
        return (
            f"{bounds}. {init} leaves {share(scale.flushed_at(GRAD_SCALER_INIT))} flushed; it doubles the "
            f"scale after every {GRAD_SCALER_INTERVAL} steps without inf, so it reaches 2^{scale.lowest} "
            f"after about {steps} steps"
        )
    if scale.highest < GRAD_SCALER_INIT:
        skipped = GRAD_SCALER_INIT - scale.highest
        return (
            f"{bounds}. {init} overflows: GradScaler halves the scale and skips the step on inf, "
            f"{skipped} skipped step(s) before 2^{scale.highest}"
        )
    return f"{bounds}. {init} lies between: {share(scale.flushed_at(GRAD_SCALER_INIT))} flush there"
