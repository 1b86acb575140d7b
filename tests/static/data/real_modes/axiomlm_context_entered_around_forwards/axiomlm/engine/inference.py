"""
AxiomLM Accelerated Inference Engine & Text Generation CLI.
"""
from typing import Optional, List, Any
import torch
import torch.nn.functional as F

from ..models.transformer import Transformer


def sample_logits(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: Optional[int] = 50,
    top_p: Optional[float] = None,
    min_p: Optional[float] = None,
    repetition_penalty: float = 1.0,
    prev_tokens: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """
    Applies temperature scaling, repetition penalty, Top-K, Min-P, and Top-P (Nucleus) truncation.
    Returns: Next token index tensor of shape (B, 1).
    """
    logits = logits.clone()

    if repetition_penalty != 1.0 and prev_tokens is not None:
        B, S = prev_tokens.shape
        for b in range(B):
            unique_toks = torch.unique(prev_tokens[b])
            tok_logits = logits[b, unique_toks]
            penalized = torch.where(tok_logits > 0, tok_logits / repetition_penalty, tok_logits * repetition_penalty)
            logits[b, unique_toks] = penalized

    if temperature <= 1e-4:
        return torch.argmax(logits, dim=-1, keepdim=True)

    logits = logits / temperature

    if top_k is not None and top_k > 0:
        k = min(top_k, logits.size(-1))
        val, _ = torch.topk(logits, k)
        logits[logits < val[:, [-1]]] = -float('Inf')

    probs = F.softmax(logits, dim=-1)

    if min_p is not None and min_p > 0.0:
        p_max = probs.max(dim=-1, keepdim=True).values
        cutoff = p_max * min_p
        probs = torch.where(probs < cutoff, torch.zeros_like(probs), probs)
        probs_sum = probs.sum(dim=-1, keepdim=True)
        probs = torch.where(probs_sum > 0, probs / probs_sum, F.softmax(logits, dim=-1))

    if top_p is not None and top_p < 1.0:
        sorted_probs, sorted_indices = torch.sort(probs, descending=True, dim=-1)
        cumulative_probs = torch.cumsum(sorted_probs, dim=-1)
        sorted_indices_to_remove = cumulative_probs > top_p
        sorted_indices_to_remove[..., 1:] = sorted_indices_to_remove[..., :-1].clone()
        sorted_indices_to_remove[..., 0] = False

        sorted_probs[sorted_indices_to_remove] = 0.0
        probs = torch.scatter(torch.zeros_like(probs), -1, sorted_indices, sorted_probs)
        probs_sum = probs.sum(dim=-1, keepdim=True)
        probs = torch.where(probs_sum > 0, probs / probs_sum, F.softmax(logits, dim=-1))

    next_tok = torch.multinomial(probs, 1)
    return next_tok



def generate_with_cache(
    model: Transformer,
    enc: Any,
    device: str,
    prompt: str = "import torch\n",
    num_samples: int = 1,
    max_length: int = 40,
    temperature: float = 1.0,
    top_k: Optional[int] = 50,
    top_p: Optional[float] = None,
    min_p: Optional[float] = None,
    repetition_penalty: float = 1.0,
) -> List[str]:
    """
    Accelerated autoregressive text generation using per-layer Key-Value caching.
    Reduces compute complexity from O(T^2) to O(1) per decoding step.
    """
    model.eval()
    prompt_tokens = enc.encode(prompt)
    x = torch.tensor(prompt_tokens, dtype=torch.long, device=device).unsqueeze(0).repeat(num_samples, 1)

    with torch.no_grad():
        kv_caches = [None] * model.config.n_layer
        logits, _, kv_caches = model(x, kv_caches=kv_caches)

        next_token = sample_logits(
            logits[:, -1, :],
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            min_p=min_p,
            repetition_penalty=repetition_penalty,
            prev_tokens=x,
        )
        generated_tokens = torch.cat((x, next_token), dim=1)

        while generated_tokens.size(1) < max_length:
            logits, _, kv_caches = model(next_token, kv_caches=kv_caches)
            next_token = sample_logits(
                logits[:, -1, :],
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
                min_p=min_p,
                repetition_penalty=repetition_penalty,
                prev_tokens=generated_tokens,
            )
            generated_tokens = torch.cat((generated_tokens, next_token), dim=1)

    samples = []
    for i in range(num_samples):
        sample_text = enc.decode(generated_tokens[i, :max_length].tolist())
        samples.append(sample_text)
    return samples
