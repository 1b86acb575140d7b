"""A small language model served in float16 (as GPTQ checkpoints are), sampling with top-p."""

import torch
from torch import nn


class TinyLM(nn.Module):
    def __init__(self, vocab_size: int = 512, hidden_size: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, hidden_size)
        self.mlp = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.GELU())
        self.head = nn.Linear(hidden_size, vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor, top_p: float = 0.9) -> torch.Tensor:
        logits = self.head(self.mlp(self.embed(input_ids)))[:, -1]
        probs = torch.softmax(logits / 0.7, dim=-1)
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        cumulative = sorted_probs.cumsum(dim=-1)
        sorted_probs = sorted_probs.masked_fill(cumulative - sorted_probs > top_p, 0.0)
        choice = torch.multinomial(sorted_probs, num_samples=1)
        return order.gather(-1, choice)


def load(path: str) -> TinyLM:
    model = TinyLM().half().cuda()
    model.load_state_dict(torch.load(path))
    return model.eval()
