# ruff: noqa
# fmt: off
# Source: vit-pytorch commit 69d24fe9e3024c0d4b02761123b8583a24ebed1e (GitHub lucidrains/vit-pytorch),
# vit_pytorch/es_vit.py, lines 5-7 and 40-59 (verbatim).
# Miss (issue 29): `log(t + eps)` with `eps = 1e-20`, the form of the guard that a `clamp(min=eps)`
# floor already was flagged in: the helper guards the student's softmax probabilities, and in
# float16 1e-20 is 0, so a probability that underflowed gives log(0) = -inf in the loss.
import torch
from torch import nn, einsum
import torch.nn.functional as F

# tensor related helpers

def log(t, eps = 1e-20):
    return torch.log(t + eps)  # expect: AMP005

# loss function # (algorithm 1 in the paper)

def view_loss_fn(
    teacher_logits,
    student_logits,
    teacher_temp,
    student_temp,
    centers,
    eps = 1e-20
):
    teacher_logits = teacher_logits.detach()
    student_probs = (student_logits / student_temp).softmax(dim = -1)
    teacher_probs = ((teacher_logits - centers) / teacher_temp).softmax(dim = -1)
    return - (teacher_probs * log(student_probs, eps)).sum(dim = -1).mean()
