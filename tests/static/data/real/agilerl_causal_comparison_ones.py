# ruff: noqa
# fmt: off
# Source: agilerl 2.58.0 (PyPI sdist), agilerl/modules/bert.py, lines 9-10 and 345-356 (verbatim,
# inside a function made for the excerpt; review 5).
# False positive (review 5): `torch.ones(...) * float("-inf")` multiplies a tensor of ones, which has
# no 0 to meet the infinity: every entry is -inf before `triu` keeps the upper triangle. The name
# `src_mask` appears only in the constructor's device. The variant after it multiplies a 0/1
# padding mask by -inf: NaN where the mask is 0.
import torch
from torch import nn


def causal_from_mask(src_mask, is_causal=None):
    # Prevent type refinement
    make_causal = is_causal is True

    if is_causal is None and src_mask is not None:
        sz = src_mask.size(0)
        causal_comparison = torch.triu(
            torch.ones(sz, sz, device=src_mask.device) * float("-inf"),
            diagonal=1,
        ).to(src_mask.dtype)
        if torch.equal(src_mask, causal_comparison):
            make_causal = True
    is_causal = make_causal
    return is_causal


# Variant (not in the source): a 0/1 padding mask times -inf.
def additive_padding(scores, padding_mask):
    return scores + padding_mask.float() * float("-inf")  # expect: AMP004
