# Source: tabpfn 9.2.0 (PyPI sdist), src/tabpfn/architectures/shared/bar_distribution.py, lines
# 106-109, 203-213 (verbatim; the class cut to these methods, the bucket lookup left out).
import torch
from torch import nn


class BarDistribution(nn.Module):
    def __init__(self, borders):
        super().__init__()
        self.register_buffer("borders", borders)
        self.register_buffer("bucket_widths", borders[1:] - borders[:-1])

    def cdf(self, logits, ys):
        probs = torch.softmax(logits, dim=-1)
        prob_so_far = torch.cumsum(probs, dim=-1) - probs
        return prob_so_far

    def compute_scaled_log_probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Compute per-bucket log densities (log-softmax scaled by bucket width)."""
        # this is equivalent to log(p(y)) of the density p
        bucket_log_probs = torch.log_softmax(logits, -1)
        return bucket_log_probs - torch.log(self.bucket_widths)

    def full_ce(self, logits: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        """Cross-entropy between target ``probs`` and the distribution of ``logits``."""
        return -(probs * torch.log_softmax(logits, -1)).sum(-1)

    def forward(self, logits, ys):
        return self.full_ce(logits, self.cdf(logits, ys)) + self.compute_scaled_log_probs(logits).mean()
