# ruff: noqa
# fmt: off
# Source: transformer-lens 2.8.1 (PyPI), transformer_lens/components/abstract_attention.py,
# lines 5-8, 25, 168-262 and 399-415 (trimmed: annotations, the KV cache, rotary, ALiBi and
# relative-bias branches are left out; the kept lines are verbatim).
# Class (a)/(f): the scores are built in a helper method and the softmax runs in `forward`, but
# `forward` upcasts q and k to float32 first whenever the model's dtype is not float32/float64.
# Class (d): NaN rows of a fully masked pattern are zeroed (`torch.where(torch.isnan(...))`).
# expect-none: AMP002,AMP003
import einops
import torch
import torch.nn as nn
import torch.nn.functional as F


class AbstractAttention(nn.Module):
    def forward(self, query_input, key_input, value_input, additive_attention_mask=None):
        q, k, v = self.calculate_qkv_matrices(query_input, key_input, value_input)

        if self.cfg.dtype not in [torch.float32, torch.float64]:
            # If using 16 bits, increase the precision to avoid numerical instabilities
            q = q.to(torch.float32)
            k = k.to(torch.float32)

        attn_scores = self.calculate_attention_scores(
            q, k
        )  # [batch, head_index, query_pos, key_pos]
        if additive_attention_mask is not None:
            attn_scores += additive_attention_mask

        attn_scores = self.hook_attn_scores(attn_scores)
        pattern = F.softmax(attn_scores, dim=-1)
        pattern = torch.where(torch.isnan(pattern), torch.zeros_like(pattern), pattern)
        pattern = self.hook_pattern(pattern)  # [batch, head_index, query_pos, key_pos]
        pattern = pattern.to(self.cfg.dtype)
        pattern = pattern.to(v.device)
        z = self.calculate_z_scores(v, pattern)  # [batch, pos, head_index, d_head]
        return z

    def calculate_attention_scores(self, q, k):
        q_ = einops.rearrange(
            q, "batch query_pos head_index d_head -> batch head_index query_pos d_head"
        )
        k_ = einops.rearrange(
            k, "batch key_pos head_index d_head -> batch head_index d_head key_pos"
        )
        attn_scores = q_ @ k_ / self.attn_scale
        return attn_scores
