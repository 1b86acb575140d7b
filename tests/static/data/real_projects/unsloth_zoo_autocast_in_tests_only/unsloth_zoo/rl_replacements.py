# ruff: noqa
# fmt: off
# Source: unsloth-zoo 2026.10.9 (PyPI sdist), unsloth_zoo/rl_replacements.py, lines 342-346 and
# 383-410 (verbatim; the signature's later parameters, the fused path and the autograd Function
# built from `post_forward` left out).
# False positive (issue 29, review 3): the only half precision that reaches this function is the
# bf16/fp16 autocast of a test (tests/test_grpo_logprob_recompute.py); the softcap is computed in the
# matmul dtype on purpose and upcast on the next line. A finding resting on tests alone is
# conditional: hidden by default, shown by --show-conditional.
import torch


def chunked_hidden_states_selective_log_softmax_recompute(
    hidden_states: torch.Tensor,
    lm_head: torch.Tensor,
    index: torch.Tensor,
    chunks: int = 4,
):
    self_fn = chunked_hidden_states_selective_log_softmax_recompute
    function = getattr(self_fn, "_autograd_function", None)
    if function is None:
        def post_forward(logits, index, scale_multiply, scale_divide, softcapping, temperature, with_entropy):
            # The scale / softcap run in the matmul dtype, then float32, exactly as the plain path.
            if scale_multiply != 0.0:
                logits = logits * scale_multiply
            if scale_divide != 0.0:
                logits = logits / scale_divide
            if softcapping != 0.0:
                logits = softcapping * torch.tanh(logits / softcapping)  # conditional: AMP001
            logits = logits.to(torch.float32)
            if temperature != 1.0:
                logits = logits / temperature
            # Target excluded from the normaliser (softmax collapse); the plain logsumexp as logaddexp, not
            # selected - logp (cancels when the target trails).
            is_target = torch.arange(logits.shape[-1], device = logits.device) == index.unsqueeze(-1)
            selected = torch.where(is_target, logits, 0.0).sum(-1)
            lse_others = torch.logsumexp(torch.where(is_target, torch.finfo(logits.dtype).min, logits), dim = -1)
            logp = -torch.nn.functional.softplus(lse_others - selected)
            logsumexp = torch.logaddexp(lse_others, selected)
            if with_entropy:
                # -sum(p * log p) on log p = z - logsumexp: logsumexp - sum(p * z) cancels badly.
                log_p = logits - logsumexp.unsqueeze(-1)
                entropy = -(torch.exp(log_p) * log_p).sum(-1)
            else:
                entropy = torch.zeros_like(logsumexp)
            return logp, logsumexp, entropy
