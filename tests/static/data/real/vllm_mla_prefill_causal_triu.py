# ruff: noqa
# fmt: off
# Source: vllm 0.33.0 (PyPI sdist), vllm/v1/attention/backends/mla/prefill/cpu_sdpa.py, lines 12,
# 22 and 41-88 (verbatim; the base class and the other methods left out).
# False positive (issue 29, review 4): `torch.ones(q, kv).triu(1)` is a causal mask: row i keeps
# columns 0..i, so no row is masked whole, the exception AMP004 documents. Its sizes come from the
# cumulative sequence lengths (`q_cu_seq_lens`), which say how big the mask is, not that it pads.
# The variant after it adds a key-padding mask: with left padding the first rows are masked whole.
import torch


class CPUSDPAMLAPrefillBackend:
    def _ragged_sdpa(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        q_cu_seq_lens: torch.Tensor,
        kv_cu_seq_lens: torch.Tensor,
        causal: bool,
        return_softmax_lse: bool,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        # q/k/v: [num_tokens, num_heads, head_dim] (ragged, concatenated).
        # q_cu_seq_lens/kv_cu_seq_lens: [num_reqs + 1] row offsets for each
        # request's query and key/value tokens.
        num_reqs = q_cu_seq_lens.numel() - 1
        assert num_reqs == kv_cu_seq_lens.numel() - 1

        out_chunks: list[torch.Tensor] = []
        lse_chunks: list[torch.Tensor] = []
        for r in range(num_reqs):
            q_start = int(q_cu_seq_lens[r])
            q_end = int(q_cu_seq_lens[r + 1])
            kv_start = int(kv_cu_seq_lens[r])
            kv_end = int(kv_cu_seq_lens[r + 1])

            q_r = q[q_start:q_end].transpose(0, 1).float()  # [NH, Sq, Hq]
            k_r = k[kv_start:kv_end].transpose(0, 1).float()  # [NH, Sk, Hq]
            v_r = v[kv_start:kv_end].transpose(0, 1).float()  # [NH, Sk, Hv]

            attn_scores = torch.matmul(q_r, k_r.transpose(-2, -1)) * self.scale
            if causal:
                causal_mask = torch.ones(
                    (q_end - q_start, kv_end - kv_start),
                    dtype=torch.bool,
                    device=attn_scores.device,
                ).triu(1)
                attn_scores.masked_fill_(causal_mask.unsqueeze(0), float("-inf"))

            attn_probs = torch.softmax(attn_scores, dim=-1, dtype=torch.float32)
            out_r = torch.matmul(attn_probs, v_r).transpose(0, 1).to(v.dtype)
            out_chunks.append(out_r)  # [Sq, NH, Hv]
            if return_softmax_lse:
                lse_chunks.append(torch.logsumexp(attn_scores, dim=-1))

        out = torch.cat(out_chunks, dim=0)
        if not return_softmax_lse:
            return out
        lse = torch.cat(lse_chunks, dim=1)
        return out, lse


# Variant (not in the source): padded keys masked under the causal mask.
def causal_padded_scores(attn_scores, q_len, kv_len, kv_pad):
    causal_mask = torch.ones((q_len, kv_len), dtype=torch.bool, device=attn_scores.device).triu(1)
    causal_mask = causal_mask | kv_pad
    attn_scores.masked_fill_(causal_mask.unsqueeze(0), float("-inf"))  # expect: AMP004
    return torch.softmax(attn_scores, dim=-1, dtype=torch.float32)
