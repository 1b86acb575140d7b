import torch
import torch.nn as nn
import torch.nn.functional as F


class Precious3MPTForCausalLM(nn.Module):
    def __init__(self, config, modality0_dim: int = 128, modality2_dim: int = 1536, modality4_dim=768):
        super().__init__()
        self.lm_head = None

        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False, device=config.init_device)
            self.lm_head._fsdp_wrap = True

    def forward(self, outputs, input_ids=None):
        if self.lm_head is not None:
            logits = self.lm_head(outputs.last_hidden_state)
        else:
            out = outputs.last_hidden_state
            out = out.to(self.transformer.wte.weight.device)
            logits = self.transformer.wte(out, True)

        return (logits,)
