from dataclasses import dataclass
from typing import Optional, Tuple, List, Union, Dict, Any, cast
import inspect
import math
import torch
import torch.nn as nn
from torch.nn import functional as F


class Transformer(nn.Module):
    """
    AxiomLM High-Performance Autoregressive Decoder Transformer.
    """
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config

        self.transformer = nn.ModuleDict(dict(wte=nn.Embedding(config.vocab_size, config.n_embd)))

        # Output projection head (weight-tied to token embedding table)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight

    def forward(
        self,
        idx: torch.Tensor,
        targets: Optional[torch.Tensor] = None,
        kv_caches: Optional[List[Optional[Tuple[torch.Tensor, torch.Tensor]]]] = None,
    ) -> Union[Tuple[torch.Tensor, Optional[torch.Tensor]], Tuple[torch.Tensor, Optional[torch.Tensor], List[Tuple[torch.Tensor, torch.Tensor]]]]:
        device = idx.device
        B, T = idx.size()
        x = self.transformer.wte(idx)


        if targets is not None:
            logits = self.lm_head(x)
            loss = fused_cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:
            if kv_caches is not None:
                logits = self.lm_head(x[:, [-1], :])
            else:
                logits = self.lm_head(x)
            loss = None

        if kv_caches is not None:
            return logits, loss, new_kv_caches
        return logits, loss
