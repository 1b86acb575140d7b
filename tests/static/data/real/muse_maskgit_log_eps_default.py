# ruff: noqa
# fmt: off
# Source: muse-maskgit-pytorch 0.3.5 (PyPI), muse_maskgit_pytorch/muse_maskgit_pytorch.py,
# lines 5-7 and 401-411 (verbatim).
# Class (h): the small constant is a default parameter of a helper (`def log(t, eps = 1e-20)`),
# the clamp floor of `log` on uniform noise drawn in the logits' dtype (`zeros_like(t).uniform_`):
# in float16 1e-20 is 0, so a noise sample of 0 gives log(0) = -inf.
import torch
import torch.nn.functional as F
from torch import nn, einsum

# sampling helpers

def log(t, eps = 1e-20):
    return torch.log(t.clamp(min = eps))  # expect: AMP005

def gumbel_noise(t):
    noise = torch.zeros_like(t).uniform_(0, 1)
    return -log(-log(noise))

def gumbel_sample(t, temperature = 1., dim = -1):
    return ((t / max(temperature, 1e-10)) + gumbel_noise(t)).argmax(dim = dim)
