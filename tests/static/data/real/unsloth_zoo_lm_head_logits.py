# ruff: noqa
# fmt: off
# Source: unsloth-zoo 2026.10.9 (PyPI sdist), unsloth_zoo/cpu/ops.py, lines 29-30 and 121-138
# (verbatim).
# False positive (issue 29, review 3): `hidden @ weight.t()` is the vocabulary projection (the LM
# head's weight), not query-key attention scores; the log-softmax after it reads logits, which do
# not approach float16's range, and the product is upcast at once.
# expect-none: AMP002
import torch
import torch.nn.functional as F


def _logprob_piece(hidden, weight, bias, targets, inv_t, softcap, logit_scale, want_entropy):
    logits = (hidden @ weight.t()).float()
    if bias is not None:
        logits = logits + bias.float()
    logits = logits * logit_scale
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)
    logits = logits * inv_t
    y = targets.unsqueeze(-1)
    target = logits.gather(-1, y).squeeze(-1)
    # Softplus form: keeps 1 - p_t past a ~16.6 lead (softmax collapse).
    log_others = torch.logsumexp(logits.scatter(-1, y, float("-inf")), dim = -1)
    log_probs = -F.softplus(log_others - target)
    log_z = target - log_probs
    if not want_entropy:
        return log_probs, log_z
    entropy = log_z - (torch.softmax(logits, dim = -1) * logits).sum(-1)
    return log_probs, entropy
