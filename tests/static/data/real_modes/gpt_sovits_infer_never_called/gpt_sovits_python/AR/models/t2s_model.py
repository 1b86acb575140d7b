import torch
from torch import nn
from gpt_sovits_python.AR.models.utils import (
    sample,
    topk_sampling,
)


class Text2SemanticDecoder(nn.Module):
    def __init__(self, config, norm_first=False, top_k=3):
        super(Text2SemanticDecoder, self).__init__()
        self.ar_predict_layer = nn.Linear(512, 1025, bias=False)

    def forward(self, x):
        return self.ar_predict_layer(x)

    def forward_old(self, x):
        return self.ar_predict_layer(x)

    def infer(
        self,
        x,
        x_lens,
        prompts,
        bert_feature,
        top_k: int = -100,
        early_stop_num: int = -1,
        temperature: float = 1.0,
    ):
        xy_dec = x
        logits = self.ar_predict_layer(xy_dec[:, -1])
        samples = topk_sampling(
            logits, top_k=top_k, top_p=1.0, temperature=temperature
        )
        return samples

    def infer_panel(self,
        x,
        x_lens,
        prompts,
        bert_feature,
        top_k: int = -100,
    ):
        xy_dec = x
        logits = self.ar_predict_layer(xy_dec[:, -1])
        samples = sample(
            logits, None, top_k=top_k
        )[0]
        return samples
