"""An RWKV-7 style time-mix block whose log-decay was "simplified", trained under bf16 autocast."""

import math

import torch
from torch import nn


class TimeMix(nn.Module):
    def __init__(self, d_model: int = 64, lora_rank: int = 16) -> None:
        super().__init__()
        self.receptance = nn.Linear(d_model, d_model, bias=False)
        self.key = nn.Linear(d_model, d_model, bias=False)
        self.value = nn.Linear(d_model, d_model, bias=False)
        self.w_lora = nn.Sequential(
            nn.Linear(d_model, lora_rank, bias=False), nn.Tanh(), nn.Linear(lora_rank, d_model)
        )
        self.output = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r, k, v = self.receptance(x), self.key(x), self.value(x)
        w = -math.exp(-0.5) * self.w_lora(x).sigmoid()
        decay = torch.exp(w)
        state = torch.zeros_like(k[:, 0])
        outputs = []
        for t in range(x.shape[1]):
            state = state * decay[:, t] + k[:, t] * v[:, t]
            outputs.append(r[:, t] * state)
        return self.output(torch.stack(outputs, dim=1))


def train(steps: int = 10) -> None:
    model = TimeMix().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(steps):
        x = torch.randn(4, 32, 64, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
