# ruff: noqa
# fmt: off
# Source: cornac 3.0.1 (PyPI sdist), cornac/models/sasrec/sasrec.py, lines 16-18, 38, 52-85 and
# 115-146 (verbatim but for the docstring and the `_init_weights` call left out; review 10).
# False positive (review 10): the `-inf` mask joins a causal mask with the padding mask, but
# `block & ~torch.eye(...)` unmasks the diagonal before the fill, so every row, a padded one too,
# keeps its own key and no row is masked whole. The variant after it keeps no diagonal: flagged.
import numpy as np
import torch
import torch.nn as nn
class SASRecModel(nn.Module):
    def __init__(
        self,
        item_num,
        embedding_dim=100,
        maxlen=20,
        n_layers=2,
        n_heads=1,
        use_pos_emb=True,
        use_biases=True,
        dropout=0.2,
        pad_idx=-1,
        init_std=0.02,
        device="cpu",
    ):
        super(SASRecModel, self).__init__()
        self.item_num = item_num
        self.pad_idx = pad_idx if pad_idx >= 0 else item_num
        self.maxlen = maxlen
        self.dev = device
        self.init_std = init_std

        # +1 row for the padding entry at pad_idx
        self.item_emb = nn.Embedding(self.item_num + 1, embedding_dim, padding_idx=self.pad_idx)
        if use_pos_emb:
            self.pos_emb = nn.Embedding(maxlen + 1, embedding_dim)
        if use_biases:
            self.item_biases = nn.Embedding(self.item_num + 1, 1, padding_idx=self.pad_idx)
        self.emb_dropout = nn.Dropout(p=dropout)

        self.attention_layernorms = nn.ModuleList()
        self.attention_layers = nn.ModuleList()
        self.forward_layernorms = nn.ModuleList()
        self.forward_layers = nn.ModuleList()
        self.last_layernorm = nn.LayerNorm(embedding_dim, eps=1e-8)

        for _ in range(n_layers):
            self.attention_layernorms.append(nn.LayerNorm(embedding_dim, eps=1e-8))
            self.attention_layers.append(nn.MultiheadAttention(embedding_dim, n_heads, dropout))
            self.forward_layernorms.append(nn.LayerNorm(embedding_dim, eps=1e-8))

    def _encode(self, hist_iids):
        # hist_iids: (B, T)
        seqs = self.item_emb(hist_iids)
        seqs = seqs * (self.item_emb.embedding_dim**0.5)
        positions = np.tile(np.arange(hist_iids.shape[1]), [hist_iids.shape[0], 1])
        if hasattr(self, "pos_emb"):
            seqs = seqs + self.pos_emb(torch.tensor(positions, dtype=torch.long, device=seqs.device))
        seqs = self.emb_dropout(seqs)

        pad_mask = hist_iids == self.pad_idx  # (B, T)
        seqs = seqs.masked_fill(pad_mask.unsqueeze(-1), 0.0)

        B, tl, _ = seqs.shape
        future = torch.triu(torch.ones(tl, tl, dtype=torch.bool, device=seqs.device), diagonal=1)
        block = future.unsqueeze(0) | pad_mask.unsqueeze(1)  # (B, T, T)
        block = block & ~torch.eye(tl, dtype=torch.bool, device=seqs.device)
        attn_mask = torch.zeros(B, tl, tl, dtype=seqs.dtype, device=seqs.device).masked_fill(block, float("-inf"))
        n_heads = self.attention_layers[0].num_heads
        attn_mask = attn_mask.repeat_interleave(n_heads, dim=0)  # (B*n_heads, T, T)

        for i in range(len(self.attention_layers)):
            seqs_t = torch.transpose(seqs, 0, 1)
            Q = self.attention_layernorms[i](seqs_t)
            mha_out, _ = self.attention_layers[i](Q, seqs_t, seqs_t, attn_mask=attn_mask)
            seqs_t = Q + mha_out
            seqs = torch.transpose(seqs_t, 0, 1)
        return seqs

    # Variant (not in the source): the same mask without the diagonal unmasked; a padded query row
    # is masked whole.
    def _encode_padded(self, seqs, pad_mask):
        B, tl, _ = seqs.shape
        future = torch.triu(torch.ones(tl, tl, dtype=torch.bool, device=seqs.device), diagonal=1)
        block = future.unsqueeze(0) | pad_mask.unsqueeze(1)  # (B, T, T)
        attn_mask = torch.zeros(B, tl, tl, dtype=seqs.dtype, device=seqs.device).masked_fill(block, float("-inf"))  # expect: AMP004
        seqs_t = torch.transpose(seqs, 0, 1)
        mha_out, _ = self.attention_layers[0](seqs_t, seqs_t, seqs_t, attn_mask=attn_mask)
        return mha_out
