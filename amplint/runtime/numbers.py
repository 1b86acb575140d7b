"""How messages and reports print the numbers they summarize, so that what they print holds for
those numbers: a share is never rounded to 0% or 100% (or across 1%) when it is not, and a range is
that of the values seen, with the non-finite ones said. Plain data, no torch."""

from __future__ import annotations

import math

from amplint.runtime.graph import NodeValues

# More decimals than any share of a real tensor's elements needs (a 1e12-element tensor's one element).
_MOST_DECIMALS = 12


def share(fraction: float) -> str:
    """`fraction` (of 1) as a percentage with as few decimals as keep it on its side of 0%, 1% and
    100%: `47%`, `0.04%`, `0.996%`, `99.96%`; `0%` and `100%` only when exact."""
    if fraction <= 0.0:
        return "0%"
    if fraction >= 1.0:
        return "100%"
    percent = 100.0 * fraction
    decimals = 0 if percent >= 1.0 else -math.floor(math.log10(percent))
    while decimals < _MOST_DECIMALS and _crosses(percent, round(percent, decimals)):
        decimals += 1
    return f"{percent:.{decimals}f}%"


def _crosses(percent: float, shown: float) -> bool:
    """Whether `shown` (a rounded `percent`) says 0%, 100%, or 1% for a share on the other side of it."""
    return shown <= 0.0 or shown >= 100.0 or (percent < 1.0 <= shown)


def value_range(found: NodeValues) -> str:
    """The range of a tensor's finite values, `[-2.48, 192]`, and its infs and NaNs: `[0, 0] and inf
    in 47%`, or `inf in 100%` when no value is finite."""
    some_finite = not math.isclose(found.inf + found.nan, 1.0)
    parts = [f"[{found.low:.3g}, {found.high:.3g}]"] if some_finite else []
    if found.inf:
        parts.append(f"inf in {share(found.inf)}")
    if found.nan:
        parts.append(f"NaN in {share(found.nan)}")
    return " and ".join(parts)
