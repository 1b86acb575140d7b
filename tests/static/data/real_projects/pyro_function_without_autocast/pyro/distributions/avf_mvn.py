# ruff: noqa
# fmt: off
# Source: pyro-ppl 1.9.2 (PyPI sdist), pyro/distributions/avf_mvn.py, lines 4-6, 70-84 and 92
# (verbatim; the rest of backward left out, its return written as the gradients it computes).
# False positive (issue 29, review 3): Pyro never enables autocast or half precision; AMP015's hazard
# needs autocast, and with no autocast region in the module and no execution mode of the project the
# finding holds only where a caller enables autocast: conditional.
import torch
from torch.autograd import Function
from torch.autograd.function import once_differentiable


class _AVFMVNSample(Function):
    @staticmethod
    def forward(ctx, loc, scale_tril, control_var, shape):
        white = torch.randn(shape, dtype=loc.dtype, device=loc.device)
        z = torch.matmul(white, scale_tril.t())
        ctx.save_for_backward(scale_tril, control_var, white)
        return loc + z

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output):  # conditional: AMP015
        L, control_var, epsilon = ctx.saved_tensors
        B, C = control_var
        g = grad_output
        loc_grad = sum_leftmost(grad_output, -1)
        gL = torch.matmul(g, L)
        return loc_grad, gL, None, None
