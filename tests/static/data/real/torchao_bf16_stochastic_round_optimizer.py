# ruff: noqa
# fmt: off
# Source: torchao 0.18.0 (PyPI sdist), test/test_low_bit_optim.py, lines 6, 12-13, 33 and 487-520
# (verbatim, the test method dedented out of its class).
# Class (b): a bf16 copy of the model trained by `optim._AdamW(..., bf16_stochastic_round=True)`; the
# test's comment says it fails after one step without stochastic rounding. The float32 model's
# AdamW beside it is the mixed-precision reference.
# expect-none: AMP016
import copy
import torch
from torch import nn
from torchao import optim


@parametrize("device", _DEVICES)
def test_optim_bf16_stochastic_round_correctness(self, device):
    torch.manual_seed(2024)
    model1 = nn.Sequential(nn.Linear(32, 1024), nn.ReLU(), nn.Linear(1024, 128))
    model1.to(device)
    model2 = copy.deepcopy(model1).bfloat16()

    # small LR so that weight update is small
    # when bf16_stochastic_round=False, the test will fail after 1 iteration
    optim1 = torch.optim.AdamW(model1.parameters(), lr=1e-5)
    optim2 = optim._AdamW(
        model2.parameters(),
        lr=1e-5,
        bf16_stochastic_round=True,
    )

    # overfit on this sample
    x = torch.randn(4, 32, device=device)

    for idx in range(5):
        # mixed-precision training
        with torch.autocast(device, dtype=torch.bfloat16):
            loss1 = model1(x)
        loss1 = loss1.sum()  # under autocast context, bf16.sum() will return fp32
        loss1.backward()
        optim1.step()
        optim1.zero_grad()

        # full BF16 training with stochastic round weight update
        loss2 = model2(x.bfloat16()).sum()
        loss2.backward()
        optim2.step()
        optim2.zero_grad()

