# ruff: noqa
# fmt: off
# Source: timm 1.0.11 (PyPI), timm/models/efficientvit_msra.py, lines 14-15, 116 and 186-207 (verbatim).
# Class (d): `v @ attn.transpose(-2, -1)` multiplies the attention *probabilities* into the values;
# it is not a query-key score product (the scores are `q.transpose(-2, -1) @ k` after `q = q * self.scale`).
# expect-none: AMP002
import torch
import torch.nn as nn


class CascadedGroupAttention(torch.nn.Module):
    def forward(self, x):
        B, C, H, W = x.shape
        feats_in = x.chunk(len(self.qkvs), dim=1)
        feats_out = []
        feat = feats_in[0]
        attn_bias = self.get_attention_biases(x.device)
        for head_idx, (qkv, dws) in enumerate(zip(self.qkvs, self.dws)):
            if head_idx > 0:
                feat = feat + feats_in[head_idx]
            feat = qkv(feat)
            q, k, v = feat.view(B, -1, H, W).split([self.key_dim, self.key_dim, self.val_dim], dim=1)
            q = dws(q)
            q, k, v = q.flatten(2), k.flatten(2), v.flatten(2)
            q = q * self.scale
            attn = q.transpose(-2, -1) @ k
            attn = attn + attn_bias[head_idx]
            attn = attn.softmax(dim=-1)
            feat = v @ attn.transpose(-2, -1)
            feat = feat.view(B, self.val_dim, H, W)
            feats_out.append(feat)
        x = self.proj(torch.cat(feats_out, 1))
        return x
