# ruff: noqa
# fmt: off
# Source: unsloth-zoo 2026.10.9 (PyPI sdist), tests/test_grpo_logprob_recompute.py, lines 31-34 and
# 238-258 (verbatim; the comparison of the results left out).
import pytest
import torch

import unsloth_zoo.rl_replacements as rr


@pytest.mark.skipif(not torch.cuda.is_available(), reason = "half-precision autocast on CUDA")
@pytest.mark.parametrize("rows, head_dtype", [(49, torch.float32), (300, torch.bfloat16), (17, torch.float16)])
@pytest.mark.parametrize("fused_linear", [True, False])
def test_cuda_autocast_matches_plain_function(rows, head_dtype, fused_linear):
    amp = torch.bfloat16 if torch.cuda.is_bf16_supported(including_emulation = False) else torch.float16
    if head_dtype == torch.bfloat16 and amp != torch.bfloat16:
        pytest.skip("no bfloat16")
    gen = torch.Generator().manual_seed(rows)
    vocab, hidden = 3000, 64
    head = (torch.randn(vocab, hidden, generator = gen) * 0.05).to(head_dtype).cuda().requires_grad_(True)
    states = torch.randn(1, rows, hidden, generator = gen).to(amp).cuda().requires_grad_(True)
    index = torch.randint(0, vocab, (1, rows), generator = gen).cuda()
    weights = torch.randn(1, rows, generator = gen).cuda()
    results = []
    for function in (rr.chunked_hidden_states_selective_log_softmax, rr.chunked_hidden_states_selective_log_softmax_recompute):
        with torch.autocast("cuda", dtype = amp):
            if function is rr.chunked_hidden_states_selective_log_softmax_recompute:
                out = function(states, head, index, 16, 0.0, 0.0, 30.0, 0.8, fused_linear = fused_linear)
            else:
                out = function(states, head, index, 16, 0.0, 0.0, 30.0, 0.8)
        grads = torch.autograd.grad((out * weights).sum(), [states, head])
