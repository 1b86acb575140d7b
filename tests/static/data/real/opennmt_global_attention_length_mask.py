# ruff: noqa
# fmt: off
# Source: OpenNMT-py 3.5.1 (PyPI sdist), onmt/utils/misc.py lines 53-58 and
# onmt/modules/global_attention.py lines 2-4, 100-118 and 136-177 (verbatim; the score's other
# attention types, the coverage and the output projection left out, a return added).
# False positive (issue 29, review 4): `sequence_mask(src_len)` is True past each source length, so
# `~mask` masks padded keys, broadcast over the target rows: a row is masked whole only for an empty
# source, the exception AMP004 documents for masks from lengths. The variant after it masks padded
# target rows too, each of them whole: flagged.
import torch
import torch.nn as nn
import torch.nn.functional as F


def sequence_mask(lengths, max_len=None):
    """
    Creates a boolean mask from sequence lengths.
    """
    max_len = max_len or lengths.max()
    return torch.arange(0, max_len, device=lengths.device) >= lengths.unsqueeze(1)


class GlobalAttention(nn.Module):
    def score(self, h_t, h_s):
        src_batch, src_len, src_dim = h_s.size()
        tgt_batch, tgt_len, tgt_dim = h_t.size()

        if self.attn_type in ["general", "dot"]:
            if self.attn_type == "general":
                h_t = self.linear_in(h_t)
            h_s_ = h_s.transpose(1, 2)
            # (batch, t_len, d) x (batch, d, s_len) --> (batch, t_len, s_len)
            return torch.bmm(h_t, h_s_)

    def forward(self, src, enc_out, src_len=None, coverage=None):
        # one step input
        if src.dim() == 2:
            one_step = True
            src = src.unsqueeze(1)
        else:
            one_step = False

        batch, src_l, dim = enc_out.size()
        batch_, target_l, dim_ = src.size()

        # compute attention scores, as in Luong et al.
        align = self.score(src, enc_out)

        if src_len is not None:
            mask = ~sequence_mask(src_len, max_len=align.size(-1))
            mask = mask.unsqueeze(1)  # Make it broadcastable.
            align.masked_fill_(~mask, -float("inf"))

        # Softmax or sparsemax to normalize attention weights
        if self.attn_func == "softmax":
            align_vectors = F.softmax(align.view(batch * target_l, src_l), -1)
        return align_vectors


# Variant (not in the source): padded target rows masked as well as padded keys.
def masked_attention(self, src, enc_out, src_pad, tgt_pad):
    align = torch.bmm(src, enc_out.transpose(1, 2))
    mask = tgt_pad.unsqueeze(2) | src_pad.unsqueeze(1)
    align.masked_fill_(mask, -float("inf"))  # expect: AMP004
    return F.softmax(align, -1)
