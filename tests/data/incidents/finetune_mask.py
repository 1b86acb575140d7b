"""Eager attention fine-tuned under float16 autocast, with a padding mask built by hand."""

import torch
from torch import nn


class MaskedAttention(nn.Module):
    def __init__(self, hidden_size: int = 64) -> None:
        super().__init__()
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size)
        self.out = nn.Linear(hidden_size, hidden_size)
        self.scale = hidden_size**-0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = (q * self.scale) @ k.transpose(-1, -2)
        length = x.shape[1]
        mask = torch.full((length, length), -1e9, device=x.device).triu(1)
        mask = mask.to(scores.dtype)
        scores = scores + mask
        return self.out(scores.softmax(dim=-1) @ v)


def finetune(batches: list[torch.Tensor]) -> None:
    model = MaskedAttention().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.amp.GradScaler("cuda")
    for x in batches:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x.cuda()).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
