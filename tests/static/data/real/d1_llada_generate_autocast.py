# ruff: noqa
# fmt: off
# Source: github.com/SimonCao1207/d1 (a fork of dllm-reasoning/d1), eval/generate.py
# @ 2c61706c79c7d5f108576ed4e355b2b2523ef9ff, lines 1-4, 8-20, 44-61, 77-103 and 120
# (trimmed: docstrings, the block bookkeeping and classifier-free guidance are left out, and the
# nested block/step loops are collapsed into one loop; the other kept lines are verbatim).
# Class (e): the sampling loop runs inside an explicit `torch.autocast(device_type="cuda")`
# region, where `F.softmax` runs in float32 whatever the model's logits dtype is; the Gumbel
# noise is float32 by construction (`.to(torch.float32)`, `dtype=torch.float32`).
# expect-none: AMP003,AMP013,AMP014
import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F


def add_gumbel_noise(logits, temperature):
    if temperature == 0.0:
        return logits  # Skip noise when temperature is 0

    # Use float32 instead of float64 for better performance
    logits = logits.to(torch.float32)
    noise = torch.rand_like(logits, dtype=torch.float32)
    gumbel_noise = (-torch.log(noise)) ** temperature
    return logits.exp() / gumbel_noise


@torch.no_grad()
def generate(model, prompt, tokenizer, steps=64, gen_length=128, block_length=32,
             temperature=0.0, cfg_scale=0.0, remasking="low_confidence", mask_id=126336):
    # Use mixed precision for faster computation
    with torch.autocast(device_type="cuda"):
        x = torch.full((prompt.shape[0], prompt.shape[1] + gen_length), mask_id, dtype=torch.long, device=prompt.device)
        x[:, : prompt.shape[1]] = prompt.clone()

        for i in range(steps):
            mask_index = x == mask_id
            logits = model(x).logits

            # Apply Gumbel noise for sampling
            logits_with_noise = add_gumbel_noise(logits, temperature)
            x0 = torch.argmax(logits_with_noise, dim=-1)

            # Handle remasking strategy
            if remasking == "low_confidence":
                # Use float32 instead of float64 for better performance
                p = F.softmax(logits, dim=-1)
                x0_p = torch.gather(p, dim=-1, index=x0.unsqueeze(-1)).squeeze(-1)
            elif remasking == "random":
                x0_p = torch.rand(x0.shape, device=x0.device)
            else:
                raise NotImplementedError(remasking)

            x0 = torch.where(mask_index, x0, x)
            confidence = torch.where(mask_index, x0_p, torch.tensor(-np.inf, device=x0.device))
        return x
