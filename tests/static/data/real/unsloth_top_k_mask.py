# ruff: noqa
# fmt: off
# Source: unsloth 2026.10.9 (PyPI sdist), unsloth/models/diffusion_samplers.py, lines 10, 12-13,
# 244-305 and 312-313 (verbatim; the top-p branch and the rest of the step left out, a return added).
# False positive (issue 29, review 3): `logits < kth` with `kth` the k-th largest logit of each row
# (`torch.topk`) is a top-k mask, the exception AMP004 documents: each row keeps its largest entries,
# so no row is masked whole. The padding mask passed to the model that made the logits says nothing
# about this mask.
# expect-none: AMP004
import math
import torch
import torch.nn.functional as F


def _block_sample(
    base,
    tokenizer,
    input_ids,
    attention_mask,
    *,
    max_new_tokens,
    steps,
    block_length,
    temperature,
    mask_id,
    eos_ids,
    mask_format,
    confidence_threshold,
    top_k = 0,
    top_p = 1.0,
    **unused,
):
    """Block diffusion decoding shared by SDAR (JetAstra/SDAR generate.py, MIT, low_confidence_dynamic) and
    LLaDA2 (its modeling generate, Apache-2.0): blocks aligned to absolute positions, block-causal attention,
    every token above `confidence_threshold` accepted at once, else the scheduled most confident ones. The
    visible prefix is recomputed each step (as LLaDA2 does) instead of SDAR's custom KV cache. temperature 0
    is greedy."""
    prompt_length = input_ids.shape[1]
    num_blocks = (prompt_length + max_new_tokens + block_length - 1) // block_length
    total_length = num_blocks * block_length
    device = input_ids.device
    block_causal = torch.tril(torch.ones(num_blocks, num_blocks, device = device, dtype = torch.bool))
    allowed = block_causal.repeat_interleave(block_length, 0).repeat_interleave(block_length, 1)[
        None
    ]
    if mask_format == "additive":
        dtype = next(base.parameters()).dtype
        attention = torch.zeros(allowed.shape, dtype = dtype, device = device)
        attention = attention.masked_fill(~allowed, torch.finfo(dtype).min)[:, None]
    else:
        attention = allowed
    position_ids = torch.arange(total_length, device = device)[None]
    x = torch.full((input_ids.shape[0], total_length), mask_id, dtype = torch.long, device = device)
    x[:, :prompt_length] = input_ids
    schedule = torch.full((steps,), block_length // steps, dtype = torch.long)
    schedule[: block_length % steps] += 1
    for block in range(prompt_length // block_length, num_blocks):
        start, end = block * block_length, (block + 1) * block_length
        for step in range(steps + 1):
            mask_index = x[:, start:end] == mask_id
            if not bool(mask_index.any()):
                break
            logits = (
                base(
                    x[:, :end],
                    attention_mask = attention[..., :end, :end],
                    position_ids = position_ids[:, :end],
                )
                .logits[:, start:end]
                .float()
            )
            if temperature > 0:
                logits = logits / temperature
                if top_k and top_k > 0:
                    kth = torch.topk(logits, top_k).values[..., -1, None]
                    logits = logits.masked_fill(logits < kth, -math.inf)
                probs = F.softmax(logits, dim = -1)
                x0 = torch.multinomial(probs.flatten(0, 1), 1).view(probs.shape[:-1])
    return x
