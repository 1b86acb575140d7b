# ruff: noqa
# fmt: off
# Source: cellpose 4.2.1.1 (PyPI sdist), cellpose/train.py, lines 7-8, 365-369 and 466-474
# (verbatim, inside a function made for the excerpt, its CUDA device set in it; review 5).
# False positive (review 5): `torch.autocast(..., dtype=net.dtype)` names no dtype this code picks:
# the network is bfloat16 or float32 (a bfloat16 one is made float32 for training), so the missing
# loss scaler is no float16 hazard here, as for a loader's `dtype=` taken from the caller. The variant
# after it autocasts to float16 by name: flagged.
import torch
from torch import nn


def train_steps(net, X, lbl, optimizer, _loss_fn_seg):
    device = torch.device("cuda")  # cellpose's training device (an argument there)
    original_net_dtype = net.dtype
    if net.dtype == torch.bfloat16:
        # NOTE: this produces a side effect of returning a network that is not of a guaranteed dtype \
        train_logger.info(">>> converting bfloat16 network to float32 for training")
        net.dtype = torch.float32
    with torch.autocast(device_type=device.type, dtype=net.dtype):
        y = net(X)[0]
    loss = _loss_fn_seg(lbl, y, device)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


# Variant (not in the source): float16 autocast on CUDA named in the code.
def train_steps_fp16(net, X, lbl, optimizer, device, _loss_fn_seg):
    with torch.autocast(device_type="cuda", dtype=torch.float16):
        y = net(X)[0]
    loss = _loss_fn_seg(lbl, y, device)
    optimizer.zero_grad()
    loss.backward()  # expect: AMP009
    optimizer.step()
